"""Testers for the low-bit weight-only quantizers: rtn, hqq, gptq, awq.

gptq and awq need a tokenizer and calibration text. The tiny zoo language models have a 256-token vocabulary,
so ``prepare_config`` attaches a byte-level tokenizer (UTF-8 bytes are ids 0..255, exactly that vocabulary)
and the real PyDocText data; the calibration ids are therefore the bytes of Python's own documentation.
"""

from __future__ import annotations

import torch

from slimkit.engines.quantization.lowbit import PackedLinear
from slimkit.engines.quantization.lowbit.layers import is_dense
from slimkit.evaluation import fidelity, size_on_disk
from tests.algorithms.testers.base import AlgorithmTesterBase


class ByteTokenizer:
    """A tokenizer whose ids are UTF-8 bytes (vocabulary 256), callable like a Hugging Face tokenizer."""

    eos_token_id = 0
    pad_token_id = 0

    def __call__(self, texts, truncation=False, max_length=None, add_special_tokens=True, **_):
        single = isinstance(texts, str)
        rows = [list(t.encode("utf-8")) for t in ([texts] if single else texts)]
        if truncation and max_length:
            rows = [r[:max_length] for r in rows]
        return {"input_ids": rows[0] if single else rows}


def _expected_layers(base: torch.nn.Module) -> list[str]:
    return [n for n, m in base.named_modules() if n and is_dense(m) and not n.endswith("lm_head")]


class _LowBitChecks:
    """Shared checks (a mixin, so the harness does not collect it): every selected layer is packed at the asked
    width, lm_head stays full precision, the model is smaller on disk and close to the original."""

    models = ["tiny_llama", "tiny_gpt2"]
    bits = 4
    group_size = 32
    min_cosine = 0.98

    def post_smash_hook(self, smashed, base, inputs):
        expected = _expected_layers(base)
        packed = {n: m for n, m in smashed.model.named_modules() if isinstance(m, PackedLinear)}
        assert sorted(packed) == sorted(expected)
        assert sorted(smashed.applied[0]["state"]["layers"]) == sorted(expected)
        for name, layer in packed.items():
            assert layer.bits == self.bits and layer.group_size == self.group_size
            assert layer.qweight.dtype == torch.uint8
            bound = layer.in_features * layer.out_features * self.bits + 64 * layer.out_features  # + unit padding
            assert layer.qweight.numel() * 8 <= bound
            assert not any(p.dim() == 2 for p in layer.parameters()), f"{name} keeps a dense weight"
        if hasattr(base, "lm_head"):
            assert not isinstance(smashed.model.get_submodule("lm_head"), PackedLinear)
        coverage = smashed.applied[0]["state"]["coverage"]
        assert coverage["share_not_excluded"] == 1.0 and coverage["quantized_layers"] == len(expected)
        assert all(x["name"] == "lm_head" and x["reason"].startswith("kept by design") for x in coverage["left"])
        assert size_on_disk(smashed) < 0.55 * size_on_disk(base)
        assert fidelity(base, smashed, inputs).cosine_mean > self.min_cosine


class TestRTN(_LowBitChecks, AlgorithmTesterBase):
    algorithm = "rtn"
    models = ["tiny_llama", "tiny_gpt2", "mlp"]
    reject_models = ["conv_only", "not_a_module"]
    hyperparameters = {"bits": 4, "group_size": 32}


class TestRTN3BitSym(_LowBitChecks, AlgorithmTesterBase):
    algorithm = "rtn"
    models = ["tiny_llama"]
    reject_models = ["conv_only"]
    bits = 3
    min_cosine = 0.95
    hyperparameters = {"bits": 3, "group_size": 32, "sym": True}


class TestHQQ(_LowBitChecks, AlgorithmTesterBase):
    algorithm = "hqq"
    reject_models = ["conv_only", "not_a_module"]
    hyperparameters = {"bits": 4, "group_size": 32, "iters": 10}


class TestHQQPrunaBfloat16(_LowBitChecks, AlgorithmTesterBase):
    """Pruna's spelling: weight_bits and compute_dtype='torch.bfloat16' (the model computes in bfloat16)."""

    algorithm = "hqq"
    models = ["tiny_llama"]
    reject_models = ["conv_only"]
    hyperparameters = {"weight_bits": 4, "group_size": 32, "iters": 5, "compute_dtype": "torch.bfloat16"}
    min_cosine = 0.97

    def post_smash_hook(self, smashed, base, inputs):
        assert smashed.model.model.norm.weight.dtype == torch.bfloat16  # cast before quantizing
        assert smashed(**inputs).logits.dtype == torch.bfloat16
        super().post_smash_hook(smashed, base, inputs)


class _Calibrated(_LowBitChecks):
    reject_models = ["mlp", "conv_only", "not_a_module"]

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_tokenizer(ByteTokenizer())
        cfg.add_data("PyDocText")


class TestGPTQ(_Calibrated, AlgorithmTesterBase):
    algorithm = "gptq"
    hyperparameters = {"bits": 4, "group_size": 32, "n_calibration_samples": 4, "seq_len": 32}


class TestAWQ(_Calibrated, AlgorithmTesterBase):
    algorithm = "awq"
    hyperparameters = {"bits": 4, "group_size": 32, "n_calibration_samples": 4, "seq_len": 32, "n_grid": 5}
