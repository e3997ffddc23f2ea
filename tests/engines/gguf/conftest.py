"""A tiny random model of every family the GGUF export writes, with the zoo's byte tokenizer.

Sizes are multiples of 32 (GGUF's block) wherever a quantizer may pack them. Weights the transformers init leaves
at zero or one (biases, norms) are randomized so that every transform of the export shows in the values.
"""

from __future__ import annotations

import pytest
import torch
import transformers as T
from torch import nn

from slimkit.engines.gguf import Packed
from slimkit.engines.quantization.lowbit.rtn import quantize_rtn
from slimkit.zoo._hf import byte_tokenizer

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.1, pad_token_id=0,
              bos_token_id=1, eos_token_id=2)
#: model_type -> (config class, model class, settings on top of COMMON); each exercises its family's transforms
SPECS = {
    "llama": (T.LlamaConfig, T.LlamaForCausalLM, dict(tie_word_embeddings=True)),
    "mistral": (T.MistralConfig, T.MistralForCausalLM, dict(sliding_window=64)),
    "granite": (T.GraniteConfig, T.GraniteForCausalLM, dict(attention_multiplier=0.2, embedding_multiplier=2.0,
                                                            residual_multiplier=0.5, logits_scaling=2.0)),
    "mixtral": (T.MixtralConfig, T.MixtralForCausalLM, dict(num_local_experts=4, num_experts_per_tok=2)),
    "olmo": (T.OlmoConfig, T.OlmoForCausalLM, dict(clip_qkv=1.0)),
    "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM, dict(tie_word_embeddings=False)),
    "qwen3": (T.Qwen3Config, T.Qwen3ForCausalLM, dict(head_dim=32)),
    "qwen2_moe": (T.Qwen2MoeConfig, T.Qwen2MoeForCausalLM, dict(num_experts=4, num_experts_per_tok=2,
                                                                moe_intermediate_size=64,
                                                                shared_expert_intermediate_size=96)),
    "gemma": (T.GemmaConfig, T.GemmaForCausalLM, dict(head_dim=32)),
    "gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM, dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=64)),
    "phi3": (T.Phi3Config, T.Phi3ForCausalLM, dict(original_max_position_embeddings=128)),
    "gpt2": (T.GPT2Config, T.GPT2LMHeadModel, dict(n_embd=64, n_layer=2, n_head=4, n_positions=128, vocab_size=256,
                                                   initializer_range=0.1, bos_token_id=1, eos_token_id=2)),
    "gpt_neox": (T.GPTNeoXConfig, T.GPTNeoXForCausalLM, dict(num_key_value_heads=None)),
    "falcon": (T.FalconConfig, T.FalconForCausalLM, dict(num_key_value_heads=None)),
    "stablelm": (T.StableLmConfig, T.StableLmForCausalLM, dict(use_qkv_bias=True, tie_word_embeddings=True)),
}
FAMILIES = sorted(SPECS)


def build(kind: str, seed: int = 0, **overrides) -> torch.nn.Module:
    """The tiny ``kind`` model, eval mode, seeded; biases and norm weights randomized."""
    config_cls, model_cls, extra = SPECS[kind]
    settings = {**(COMMON if kind != "gpt2" else {}), **extra, **overrides}
    settings = {k: v for k, v in settings.items() if v is not None}
    torch.manual_seed(seed)
    model = model_cls(config_cls(**settings)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias") or (param.dim() == 1 and "norm" in name) or "ln_" in name:
                param.normal_(0.0 if name.endswith(".bias") else 1.0, 0.1)
    return model


class PackedExperts(nn.Module):
    """A stand-in for a packed experts module (4-bit symmetric codes per expert, no forward) and its writer adapter:
    what a packed experts type needs to reach GGUF."""

    PARAMS = ("gate_up_proj", "down_proj")

    def __init__(self, experts: nn.Module) -> None:
        super().__init__()
        self.grids = {p: [quantize_rtn(w, 4, 32, True) for w in getattr(experts, p).detach()] for p in self.PARAMS}

    def packed(self, param: str) -> Packed:
        q, s, z = (torch.stack(parts) for parts in zip(*self.grids[param], strict=True))
        return Packed(q, s, z, bits=4, group_size=32)

    @staticmethod
    def adapter(module: PackedExperts, path: str) -> list[tuple[str, Packed]]:
        """The ``slimkit.engines.gguf.PACKED`` entry for this type."""
        return [(f"{path}.{p}", module.packed(p)) for p in PackedExperts.PARAMS]


def pack_experts(model: nn.Module) -> None:
    """Swap every experts module of ``model`` for a :class:`PackedExperts`."""
    for layer in model.model.layers:
        layer.mlp.experts = PackedExperts(layer.mlp.experts)


def tiny_llama() -> torch.nn.Module:
    return build("llama")


def tiny_qwen2() -> torch.nn.Module:
    return build("qwen2", seed=1)


BUILDERS = {"llama": tiny_llama, "qwen2": tiny_qwen2}


@pytest.fixture(params=sorted(BUILDERS))
def arch(request) -> str:
    return request.param


@pytest.fixture(params=FAMILIES)
def family(request) -> str:
    return request.param


@pytest.fixture
def tokenizer():
    return byte_tokenizer()
