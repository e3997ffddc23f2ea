"""Tiny Llama (GQA, tied embeddings) and Qwen2 (q/k/v biases) built from configs, with the zoo's byte tokenizer."""

from __future__ import annotations

import pytest
import torch
import transformers

from slimkit.zoo._hf import byte_tokenizer

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.1)


def tiny_llama() -> torch.nn.Module:
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**COMMON, tie_word_embeddings=True)).eval()


def tiny_qwen2() -> torch.nn.Module:
    torch.manual_seed(1)
    model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**COMMON, tie_word_embeddings=False)).eval()
    with torch.no_grad():  # Qwen2 initialises its q/k/v biases to zero: make them matter
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.1)
    return model


BUILDERS = {"llama": tiny_llama, "qwen2": tiny_qwen2}


@pytest.fixture(params=sorted(BUILDERS))
def arch(request) -> str:
    return request.param


@pytest.fixture
def tokenizer():
    return byte_tokenizer()
