"""Testers of Pruna's library-backed quantizers: torchao (quantize_) and quanto (optimum-quanto)."""

from __future__ import annotations

import torch

from slimkit.evaluation import fidelity, size_on_disk
from tests.algorithms.testers.base import AlgorithmTesterBase


def _linear_names(model: torch.nn.Module, skip: str = "") -> list[str]:
    return sorted(n for n, m in model.named_modules() if type(m) is torch.nn.Linear and not (skip and n.endswith(skip)))


class TestTorchao(AlgorithmTesterBase):
    algorithm = "torchao"
    models = ["mlp", "tiny_llama"]
    reject_models = ["conv_only", "not_a_module"]
    hyperparameters = {"quant_type": "int8wo", "exclude": ["lm_head"]}

    def post_smash_hook(self, smashed, base, inputs):
        from torchao.utils import TorchAOBaseTensor

        wanted = _linear_names(base, "lm_head")
        quantized = sorted(n for n, m in smashed.model.named_modules()
                           if isinstance(getattr(m, "weight", None), TorchAOBaseTensor))
        assert quantized == wanted and wanted
        assert smashed.applied[0]["state"]["torchao_type"] == "Int8Tensor"
        assert size_on_disk(smashed) < 0.6 * size_on_disk(base)
        assert fidelity(base, smashed, inputs).cosine_mean > 0.999  # int8 per-channel weights


class TestTorchaoInt4Dynamic(TestTorchao):
    models = ["tiny_llama"]
    #: Pruna's target_modules: the attention projections only (lm_head is not included, the MLPs are excluded)
    hyperparameters = {"quant_type": "int4dq", "group_size": 32,
                       "target_modules": {"include": ["model.layers.*"], "exclude": ["*.mlp.*"]}}

    def post_smash_hook(self, smashed, base, inputs):
        state = smashed.applied[0]["state"]
        assert state["torchao_type"] == "IntxUnpackedToInt8Tensor"
        wanted = [n for n in _linear_names(base) if n.startswith("model.layers.") and ".mlp." not in n]
        assert sorted(state["layers"]) == wanted and all(".self_attn." in n for n in wanted)
        assert smashed.coverage["torchao"]["share_not_excluded"] == 1.0  # the rest is left by the user's choice
        assert all("target_modules=" in x["reason"] for x in smashed.coverage["torchao"]["left"])
        assert fidelity(base, smashed, inputs).cosine_mean > 0.98  # int4 weights, int8 activations


class TestQuanto(AlgorithmTesterBase):
    algorithm = "quanto"
    models = ["mlp", "tiny_llama"]
    reject_models = ["conv_only", "not_a_module"]
    hyperparameters = {"weight_bits": "qint8"}
    bits = 8

    def post_smash_hook(self, smashed, base, inputs):
        from optimum.quanto import QLinear, QTensor

        layers = {n: m for n, m in smashed.model.named_modules() if isinstance(m, QLinear)}
        assert sorted(layers) == _linear_names(base) and layers
        assert all(isinstance(m.weight, QTensor) and m.weight.qtype.bits == self.bits for m in layers.values())
        assert size_on_disk(smashed) < 0.5 * size_on_disk(base)
        # fidelity runs both models under torch.inference_mode, where quanto's own int4 Linear fails (an autograd
        # Function on inference tensors); slimkit runs the quanto layers outside it
        assert fidelity(base, smashed, inputs).cosine_mean > 0.99


class TestQuantoInt4(TestQuanto):
    """qint4: quanto compiles its C++ unpacking extension on first use (~20 s on 2 cores), so the slow tier."""

    models = ["mlp"]
    hyperparameters = {"weight_bits": "qint4"}
    bits = 4
    marks = ["slow"]


class TestQuantoActivations(TestQuanto):
    models = ["tiny_bert"]
    hyperparameters = {"weight_bits": "qint8", "act_bits": "qint8", "calibration_samples": 2}

    def post_smash_hook(self, smashed, base, inputs):
        from optimum.quanto import QLinear

        state = smashed.applied[0]["state"]
        assert state["calibration"] == "SmashConfig example inputs"
        scales = [float(m.input_scale) for m in smashed.model.modules() if isinstance(m, QLinear)]
        assert scales and all(s != 1.0 and s > 0 for s in scales)  # calibrated, not quanto's initial scale
        assert fidelity(base, smashed, inputs).cosine_mean > 0.99
