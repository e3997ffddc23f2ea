"""Tiny random transformers 5 MoE language models (hidden 64, 4 experts, top-2, 2 layers) for the experts tests."""

from __future__ import annotations

import torch
import transformers

COMMON = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              num_experts_per_tok=2, max_position_embeddings=128)

CONFIGS = {
    "mixtral": lambda: transformers.MixtralConfig(**COMMON, intermediate_size=96, num_local_experts=4),
    "qwen2_moe": lambda: transformers.Qwen2MoeConfig(**COMMON, intermediate_size=96, moe_intermediate_size=48,
                                                     shared_expert_intermediate_size=96, num_experts=4),
    "qwen3_moe": lambda: transformers.Qwen3MoeConfig(**COMMON, intermediate_size=96, moe_intermediate_size=48,
                                                     num_experts=4, head_dim=16),
    "olmoe": lambda: transformers.OlmoeConfig(**COMMON, intermediate_size=48, num_experts=4),
}


def tiny_config(family: str) -> transformers.PretrainedConfig:
    """The tiny config of ``family`` (a key of :data:`CONFIGS`)."""
    return CONFIGS[family]()


def tiny_moe(family: str, seed: int = 0) -> torch.nn.Module:
    """A seeded random causal LM of ``family`` in eval mode."""
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(tiny_config(family)).eval()


def experts_of(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """``{name: module}`` of the model's MoE experts modules (whatever their class)."""
    return {n: m for n, m in model.named_modules() if n.endswith("mlp.experts")}
