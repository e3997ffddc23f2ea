"""``tiny_bert``: a seeded two-layer BERT with a sequence-classification head."""

from __future__ import annotations

import torch
from torch import nn

from slimkit.zoo._common import check_divisible
from slimkit.zoo._hf import TINY_SHAPE, build_seeded, check_positions, random_tokens
from slimkit.zoo.registry import ZooModel

TASK = "sequence_classification"
ARCH_DEFAULTS = {**TINY_SHAPE, "max_position_embeddings": 64, "num_labels": 2, "seed": 0}
INPUT_DEFAULTS = {"batch_size": 2, "seq_len": 16}


def build(**arch: int) -> nn.Module:
    """Build ``BertForSequenceClassification`` from the tiny config with weights drawn from ``seed``."""
    check_divisible("tiny_bert", arch, "hidden_size", "num_attention_heads")
    return build_seeded("BertForSequenceClassification", "BertConfig", arch, "zoo model 'tiny_bert'")


def load(batch_size: int, seq_len: int, **arch: int) -> ZooModel:
    """Build the seeded model and seeded token inputs; the last row is padded to exercise the mask."""
    check_positions("tiny_bert", seq_len, arch["max_position_embeddings"], "max_position_embeddings")
    ids = random_tokens(arch["vocab_size"], batch_size, seq_len, arch["seed"])
    mask = torch.ones_like(ids)
    if batch_size > 1 and seq_len > 1:
        mask[-1, seq_len // 2 :] = 0
        ids[-1, seq_len // 2 :] = 0
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    return ZooModel(build(**arch), inputs, "tiny_bert", meta={"num_labels": arch["num_labels"]})
