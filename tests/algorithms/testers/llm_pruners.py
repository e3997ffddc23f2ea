"""Testers of the calibrated LLM pruners (sparsegpt, wanda): exact sparsity per layer, N:M groups, sparse + 4-bit.

Like gptq's testers, the tiny zoo language models get a byte-level tokenizer and the real PyDocText text.
"""

from __future__ import annotations

import torch

from slimkit.core.weights import weight_of
from slimkit.engines.quantization.lowbit import PackedLinear
from slimkit.engines.quantization.lowbit.layers import is_dense
from tests.algorithms.testers.base import AlgorithmTesterBase
from tests.algorithms.testers.lowbit import ByteTokenizer

REJECT = ["mlp", "conv_only", "not_a_module"]
CALIBRATION = {"n_calibration_samples": 4, "seq_len": 32}


def _pruned_layers(base: torch.nn.Module) -> list[str]:
    return [n for n, m in base.named_modules() if n and is_dense(m) and not n.endswith("lm_head")]


def _weight(model: torch.nn.Module, name: str) -> torch.Tensor:
    module = model.get_submodule(name)
    return module.dequantize() if isinstance(module, PackedLinear) else weight_of(module).detach()


class _Checks:
    """Shared checks (a mixin): every layer in the blocks at the asked sparsity, lm_head left dense and recorded."""

    models = ["tiny_llama", "tiny_gpt2"]
    reject_models = REJECT
    #: zeros per row group of M columns (N:M), else None
    pattern: tuple[int, int] | None = None

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_tokenizer(ByteTokenizer())
        cfg.add_data("PyDocText")

    def check_layer(self, name: str, w: torch.Tensor, base_w: torch.Tensor) -> None:
        zeros = w == 0
        if self.pattern is None:
            assert int(zeros.sum()) == w.numel() // 2, name  # exactly 50 % of the layer
        else:
            n, m = self.pattern
            per_group = zeros.reshape(w.shape[0], -1, m).sum(-1)
            assert bool((per_group == n).all()), f"{name}: groups of {m} with {per_group.unique().tolist()} zeros"

    def post_smash_hook(self, smashed, base, inputs):
        state = smashed.applied[0]["state"]
        layers = _pruned_layers(base)
        assert sorted(state["sparsity"]) == sorted(layers)
        for name in layers:
            w, base_w = _weight(smashed.model, name), weight_of(base.get_submodule(name)).detach()
            self.check_layer(name, w, base_w)
            assert state["sparsity"][name] == round(float((w == 0).float().mean()), 6)
        if hasattr(base, "lm_head"):  # left dense, and said so
            assert torch.equal(smashed.model.lm_head.weight, base.lm_head.weight)
        coverage = state["coverage"]
        assert coverage["quantized_layers"] == len(layers) and coverage["share_not_excluded"] == 1.0
        assert all(x["name"] == "lm_head" and x["reason"].startswith("kept by design") for x in coverage["left"])


class TestSparseGPT(_Checks, AlgorithmTesterBase):
    algorithm = "sparsegpt"
    hyperparameters = {"sparsity": 0.5, "block_size": 32, **CALIBRATION}

    def check_layer(self, name, w, base_w):
        super().check_layer(name, w, base_w)
        kept = w != 0
        assert not torch.equal(w[kept], base_w[kept]), f"{name}: no error was spread onto the kept weights"


class TestSparseGPT24(TestSparseGPT):
    models = ["tiny_llama"]
    pattern = (2, 4)
    hyperparameters = {"mask_structure": "2:4", **CALIBRATION}


class TestSparseGPT4Bit(_Checks, AlgorithmTesterBase):
    """Sparse + 4-bit: 2:4 pruned and quantized in one sweep, packed like gptq (reloaded by replay)."""

    algorithm = "sparsegpt"
    models = ["tiny_llama"]
    hyperparameters = {"mask_structure": "2:4", "bits": 4, "group_size": 32, **CALIBRATION}

    def check_layer(self, name, w, base_w):
        zeros = (w == 0).reshape(w.shape[0], -1, 4).sum(-1)
        assert bool((zeros >= 2).all()), name  # 2 pruned per group of 4 (a kept weight may also round to 0)
        assert float((zeros == 2).float().mean()) > 0.9, name

    def post_smash_hook(self, smashed, base, inputs):
        super().post_smash_hook(smashed, base, inputs)
        packed = {n: m for n, m in smashed.model.named_modules() if isinstance(m, PackedLinear)}
        assert sorted(packed) == sorted(_pruned_layers(base))
        assert sorted(smashed.applied[0]["state"]["layers"]) == sorted(packed)
        assert all(m.bits == 4 and m.group_size == 32 for m in packed.values())


class TestWanda(_Checks, AlgorithmTesterBase):
    algorithm = "wanda"
    hyperparameters = {"sparsity": 0.5, **CALIBRATION}

    def check_layer(self, name, w, base_w):
        zeros = w == 0
        assert bool((zeros.sum(dim=1) == w.shape[1] // 2).all()), f"{name}: not 50 % in every output row"
        assert torch.equal(w[~zeros], base_w[~zeros]), f"{name}: Wanda changed a kept weight"


class TestWanda48(TestWanda):
    models = ["tiny_llama"]
    pattern = (4, 8)
    hyperparameters = {"mask_structure": "4:8", **CALIBRATION}

    def check_layer(self, name, w, base_w):
        _Checks.check_layer(self, name, w, base_w)
        assert torch.equal(w[w != 0], base_w[w != 0])
