"""``tiny_llama``: a seeded two-layer Llama with grouped-query attention (4 query heads, 2 key/value heads)."""

from __future__ import annotations

from torch import nn

from slimkit.zoo._common import check_divisible
from slimkit.zoo._hf import build_seeded, byte_tokenizer, check_positions, random_tokens
from slimkit.zoo.registry import ZooModel

TASK = "causal_lm"
#: byte-level text: with the byte tokenizer, PyDocText calibrates and fine-tunes these models offline
DATA = "PyDocText"
ARCH_DEFAULTS = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "seed": 0,
}
INPUT_DEFAULTS = {"batch_size": 2, "seq_len": 16}


def build(**arch: int) -> nn.Module:
    """Build ``LlamaForCausalLM`` from the tiny config with weights drawn from ``seed``."""
    check_divisible("tiny_llama", arch, "hidden_size", "num_attention_heads")
    check_divisible("tiny_llama", arch, "num_attention_heads", "num_key_value_heads")
    return build_seeded("LlamaForCausalLM", "LlamaConfig", arch, "zoo model 'tiny_llama'", tie_word_embeddings=False)


def load(batch_size: int, seq_len: int, **arch: int) -> ZooModel:
    """Build the seeded model and seeded ``{"input_ids": [batch_size, seq_len]}``."""
    check_positions("tiny_llama", seq_len, arch["max_position_embeddings"], "max_position_embeddings")
    ids = random_tokens(arch["vocab_size"], batch_size, seq_len, arch["seed"])
    return ZooModel(build(**arch), {"input_ids": ids}, "tiny_llama", tokenizer=byte_tokenizer(arch["vocab_size"]))
