"""``tiny_gpt2``: a seeded two-layer GPT-2 language model (tied input/output embeddings, Conv1D layers)."""

from __future__ import annotations

from torch import nn

from slimkit.zoo._common import check_divisible
from slimkit.zoo._hf import build_seeded, causal_lm
from slimkit.zoo.registry import ZooModel

TASK = "causal_lm"
#: byte-level text: with the byte tokenizer, PyDocText calibrates and fine-tunes these models offline
DATA = "PyDocText"
ARCH_DEFAULTS = {"vocab_size": 256, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4, "seed": 0}
INPUT_DEFAULTS = {"batch_size": 2, "seq_len": 16}


def build(**arch: int) -> nn.Module:
    """Build ``GPT2LMHeadModel`` from the tiny config with weights drawn from ``seed``."""
    check_divisible("tiny_gpt2", arch, "n_embd", "n_head")
    last = arch["vocab_size"] - 1  # GPT-2's default special token 50256 is outside a tiny vocabulary
    return build_seeded(
        "GPT2LMHeadModel", "GPT2Config", arch, "zoo model 'tiny_gpt2'", bos_token_id=last, eos_token_id=last
    )


def load(batch_size: int, seq_len: int, **arch: int) -> ZooModel:
    """Build the seeded model and seeded ``{"input_ids": [batch_size, seq_len]}``."""
    return causal_lm("tiny_gpt2", build, "n_positions", batch_size, seq_len, arch)
