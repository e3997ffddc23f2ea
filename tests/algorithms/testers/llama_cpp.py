"""Testers for the llama_cpp compiler (marked ``llamacpp``: they need llama-cpp-python, see ``make test-llamacpp``).

fp32 export (Llama, and GPT-2 with its Conv1D layers): llama.cpp's logits match the transformers model within 0.02
(its KV cache is fp16). gptq (group 32)
-> llama_cpp: the file stores GPTQ's 4-bit grid as Q4_1 blocks at under 0.45x the fp32 bytes, and generates.
(tests/engines/gguf/test_runtime.py compares llama.cpp's logits with slimkit's own quantized model.)
"""

from __future__ import annotations

import torch

from slimkit.engines.gguf.runtime import LlamaCppModule
from slimkit.utils import main_tensor, run_model
from slimkit.zoo._hf import byte_tokenizer
from tests.algorithms.testers.base import AlgorithmTesterBase


def _logits(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return main_tensor(run_model(model, inputs)).float()


class TestLlamaCpp(AlgorithmTesterBase):
    algorithm = "llama_cpp"
    models = ["tiny_llama", "tiny_gpt2"]
    reject_models = ["mlp", "tiny_opt"]
    hyperparameters = {"n_threads": 1, "n_ctx": 64}
    marks = ["llamacpp"]

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_tokenizer(byte_tokenizer())

    def post_smash_hook(self, smashed, base, inputs):
        assert isinstance(smashed.model, LlamaCppModule) and smashed.applied[-1]["state"]["n_ctx"] == 64
        state = smashed.applied[-1]["state"]
        assert state["file_type"] == "ALL_F32" and state["architecture"] == base.config.model_type
        assert (_logits(smashed, inputs) - _logits(base, inputs)).abs().max() < 0.02


class TestGPTQThenLlamaCpp(TestLlamaCpp):
    """The headline recipe: GPTQ's 4-bit group-32 weights reach llama.cpp as Q4_1 blocks, not re-quantized."""

    extra_config = {"quantizer": "gptq", "gptq_group_size": 32, "gptq_n_calibration_samples": 4, "gptq_seq_len": 32}
    reject_models = ["tiny_opt"]

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_tokenizer(byte_tokenizer())
        cfg.add_data("PyDocText")

    def post_smash_hook(self, smashed, base, inputs):
        assert smashed.algorithms == ["gptq", "llama_cpp"]
        state = smashed.applied[-1]["state"]
        assert state["file_type"] == "MOSTLY_Q4_1"
        assert state["gguf_bytes"] < 0.45 * sum(p.numel() * 4 for p in base.parameters())
        text = smashed.model.generate(inputs["input_ids"][:1], max_new_tokens=4)
        assert text.shape == (1, inputs["input_ids"].shape[1] + 4)


class TestLlamaCppQuantizationMethod(TestLlamaCpp):
    """Pruna's ``quantization_method``: llama.cpp's own quantizer rewrites the float export (q8_0: every matrix)."""

    models = ["tiny_llama"]
    hyperparameters = {"n_threads": 1, "n_ctx": 64, "quantization_method": "q8_0"}

    def post_smash_hook(self, smashed, base, inputs):
        state = smashed.applied[-1]["state"]
        assert state["quantization_method"] == "q8_0" and state["file_type"] == "MOSTLY_Q8_0"
        matrices = sum(1 for _, p in base.named_parameters() if p.dim() == 2)
        assert state["tensor_types"] == {"F32": 2 * base.config.num_hidden_layers + 1, "Q8_0": matrices}
        assert state["gguf_bytes"] < 0.35 * sum(p.numel() * 4 for p in base.parameters())
        assert (_logits(smashed, inputs) - _logits(base, inputs)).abs().max() < 0.1
