from __future__ import annotations

import torch

from slimkit.core.weights import DENSE, FALLBACK, find_targets, select
from slimkit.engines.onnx import OnnxRuntimeModule
from slimkit.engines.quantization.int8.linear import FULL_RANGE, SATURATION_SAFE, Int8Linear, choose_path
from slimkit.evaluation import fidelity, size_on_disk
from tests.algorithms import models as harness_models
from tests.algorithms.testers.base import AlgorithmTesterBase


class _DynamicInt8MLP(torch.nn.Module):
    """Already holds a torch.ao dynamic int8 Linear: onnxruntime cannot export it and must refuse it."""

    def __init__(self) -> None:
        super().__init__()
        from torch.ao.nn.quantized.dynamic import Linear

        self.fc = Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class SensitiveCNN(torch.nn.Module):
    """A CNN with one layer int8 cannot represent: each conv2 output channel has one huge weight on an input
    channel that is always zero (conv1's channel 0 never fires), so per-channel int8 rounds the weights that
    matter to zero. Only conv2 back in fp32 restores the output; int8_static's fallback must find exactly it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.act1 = torch.nn.ReLU6()
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.act2 = torch.nn.ReLU()
        self.fc = torch.nn.Linear(8 * 8 * 8, 4)
        with torch.no_grad():
            self.conv1.bias[0] = -100.0
            self.conv2.weight[:, 0, 1, 1] = 50.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act2(self.conv2(self.act1(self.bn1(self.conv1(x)))))
        return self.fc(torch.flatten(x, 1))


harness_models.LOCAL.setdefault("dynamic_int8_mlp", (_DynamicInt8MLP, lambda: torch.randn(2, 8)))
harness_models.LOCAL.setdefault("sensitive_cnn", (SensitiveCNN, lambda: torch.randn(8, 3, 8, 8)))


def _linear_names(model: torch.nn.Module) -> list[str]:
    return [t.name for t in select(find_targets(model), DENSE)]  # Linear (and subclasses), Conv1D


class TestInt8Smooth(AlgorithmTesterBase):
    algorithm = "int8_smooth"
    models = ["mlp", "tiny_bert", "tiny_llama", "tiny_gpt2"]  # tiny_gpt2: Conv1D layers, smoothed through LayerNorm
    reject_models = ["conv_only", "no_weights", "not_a_module"]
    hyperparameters = {"min_cosine": 0.99, "exclude": ["lm_head"]}

    def post_smash_hook(self, smashed, base, inputs):
        state = smashed.applied[0]["state"]
        linears = [n for n in _linear_names(base) if n != "lm_head"]
        assert sorted(state["int8_layers"] + state["fp32_layers"]) == sorted(linears)
        int8 = sorted(n for n, m in smashed.model.named_modules() if type(m) is Int8Linear)
        assert int8 == sorted(state["int8_layers"]) and int8
        assert all(not m.reduce_range for m in smashed.model.modules() if type(m) is Int8Linear)
        safe = state["int8_path"] == choose_path() == SATURATION_SAFE  # the probe's recipe (or the forced one)
        assert all(m.saturation_safe == safe for m in smashed.model.modules() if type(m) is Int8Linear)
        assert state["cosine"] >= 0.99 and state["calibration"] == "SmashConfig example inputs"
        assert fidelity(base, smashed, inputs).cosine_mean > 0.99
        assert size_on_disk(smashed) < 0.75 * size_on_disk(base)
        left = {x["name"]: x["reason"] for x in state["coverage"]["left"]}
        assert all(left[n].startswith(FALLBACK) for n in state["fp32_layers"])
        assert state["coverage"]["quantized_layers"] == len(state["int8_layers"])
        if "llama" in type(base).__name__.lower():  # pre-norm: smoothing folds into both RMSNorms
            producers = {g["producer"].rsplit(".", 1)[-1] for g in state["smoothed"]}
            assert {"input_layernorm", "post_attention_layernorm"} <= producers


class TestInt8SmoothBudget(TestInt8Smooth):
    """A budget all-int8 cannot meet: the most sensitive layers go back to fp32, and the reload replays that."""

    models = ["tiny_bert"]
    # all int8 on tiny_bert's random weights: cosine 0.99997 with 127-level weights, 0.9997 with pair-safe ones
    BUDGET = 0.99999 if choose_path() == FULL_RANGE else 0.9999
    hyperparameters = {"min_cosine": BUDGET, "smooth": False}

    def post_smash_hook(self, smashed, base, inputs):
        state = smashed.applied[0]["state"]
        assert state["cosine_all_int8"] < self.BUDGET <= state["cosine"]
        assert state["fp32_layers"] and state["int8_layers"] and state["smoothed"] == []
        for name in state["fp32_layers"]:
            assert type(smashed.model.get_submodule(name)) is torch.nn.Linear


class TestInt8Static(AlgorithmTesterBase):
    algorithm = "int8_static"
    models = ["resnet_tiny", "digits_cnn"]
    reject_models = ["mlp", "tiny_bert", "not_a_module"]
    hyperparameters = {"observer": "histogram"}

    def post_smash_hook(self, smashed, base, inputs):
        assert isinstance(smashed.model, torch.fx.GraphModule)
        kinds = {type(m).__name__ for m in smashed.model.modules()}
        assert "ConvReLU2d" in kinds and not any(isinstance(m, torch.nn.Conv2d) for m in smashed.model.modules())
        assert smashed.applied[0]["state"]["quantized_modules"] >= 3
        assert size_on_disk(smashed) < 0.5 * size_on_disk(base)
        assert fidelity(base, smashed, inputs).cosine_mean > 0.99


class TestInt8StaticFallback(TestInt8Static):
    """All int8 misses the budget on SensitiveCNN: the fallback keeps exactly conv2 (+ its ReLU) in fp32."""

    models = ["sensitive_cnn"]
    reject_models = ["mlp"]
    hyperparameters = {"min_cosine": 0.99}

    def post_smash_hook(self, smashed, base, inputs):
        state = smashed.applied[0]["state"]
        assert state["cosine_all_int8"] < 0.9 and state["cosine"] >= 0.99
        assert state["fp32_layers"] == ["conv2"] and state["fp32_modules"] == ["conv2", "act2"]
        conv2 = smashed.model.conv2  # conv + ReLU fused, but float: torch.ao's intrinsic (not quantized) module
        assert type(conv2) is torch.ao.nn.intrinsic.ConvReLU2d and conv2[0].weight.dtype == torch.float32
        assert all(".quantized" in type(m).__module__ for m in (smashed.model.conv1, smashed.model.fc))
        assert fidelity(base, smashed, inputs).cosine_mean >= 0.99  # the budget, re-measured on the calibration inputs


class TestOnnxRuntime(AlgorithmTesterBase):
    algorithm = "onnxruntime"
    models = ["mlp", "resnet_tiny", "tiny_bert"]
    reject_models = ["dynamic_int8_mlp", "not_a_module"]
    hyperparameters = {"threads": 1}
    reload_atol = 0.0

    def post_smash_hook(self, smashed, base, inputs):
        assert isinstance(smashed.model, OnnxRuntimeModule)
        assert smashed.model.session.get_session_options().intra_op_num_threads == 1
        assert not any(p.numel() for p in smashed.parameters())  # the weights live in ONNX Runtime
        fid = fidelity(base, smashed, inputs)
        assert fid.cosine_min > 0.99999 and fid.max_abs < 1e-4


class TestOnnxRuntimeInt8(TestOnnxRuntime):
    models = ["tiny_bert"]
    hyperparameters = {"quantize": "int8_dynamic", "per_channel": True}
    reject_models = ["dynamic_int8_mlp"]

    def post_smash_hook(self, smashed, base, inputs):
        import onnx

        graph = onnx.load(smashed.model.onnx_path).graph
        assert any(node.op_type in ("DynamicQuantizeLinear", "MatMulInteger", "DynamicQuantizeMatMul")
                   for node in graph.node)
        assert fidelity(base, smashed, inputs).cosine_mean > 0.99
