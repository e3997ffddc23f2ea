"""``tiny_llama``: a seeded two-layer Llama with grouped-query attention (4 query heads, 2 key/value heads)."""

from __future__ import annotations

from torch import nn

from slimkit.zoo._common import check_divisible
from slimkit.zoo._hf import TINY_SHAPE, build_seeded, causal_lm
from slimkit.zoo.registry import ZooModel

TASK = "causal_lm"
#: byte-level text: with the byte tokenizer, PyDocText calibrates and fine-tunes these models offline
DATA = "PyDocText"
ARCH_DEFAULTS = {**TINY_SHAPE, "num_key_value_heads": 2, "max_position_embeddings": 128, "seed": 0}
INPUT_DEFAULTS = {"batch_size": 2, "seq_len": 16}


def build(**arch: int) -> nn.Module:
    """Build ``LlamaForCausalLM`` from the tiny config with weights drawn from ``seed``."""
    check_divisible("tiny_llama", arch, "hidden_size", "num_attention_heads")
    check_divisible("tiny_llama", arch, "num_attention_heads", "num_key_value_heads")
    return build_seeded("LlamaForCausalLM", "LlamaConfig", arch, "zoo model 'tiny_llama'", tie_word_embeddings=False)


def load(batch_size: int, seq_len: int, **arch: int) -> ZooModel:
    """Build the seeded model and seeded ``{"input_ids": [batch_size, seq_len]}``."""
    return causal_lm("tiny_llama", build, "max_position_embeddings", batch_size, seq_len, arch)
