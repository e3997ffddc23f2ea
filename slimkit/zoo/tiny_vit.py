"""``tiny_vit``: a seeded two-layer Vision Transformer classifier for 32x32 images."""

from __future__ import annotations

import torch
from torch import nn

from slimkit.errors import ConfigError
from slimkit.zoo._common import check_divisible
from slimkit.zoo._hf import build_seeded
from slimkit.zoo.registry import ZooModel

TASK = "image_classification"
ARCH_DEFAULTS = {
    "image_size": 32,
    "patch_size": 8,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_labels": 10,
    "seed": 0,
}
INPUT_DEFAULTS = {"batch_size": 2}


def build(**arch: int) -> nn.Module:
    """Build ``ViTForImageClassification`` from the tiny config with weights drawn from ``seed``."""
    check_divisible("tiny_vit", arch, "hidden_size", "num_attention_heads")
    if arch["image_size"] % arch["patch_size"]:
        raise ConfigError(
            f"zoo model 'tiny_vit': image_size={arch['image_size']} is not a multiple of "
            f"patch_size={arch['patch_size']}; pick a patch size that divides the image size."
        )
    return build_seeded("ViTForImageClassification", "ViTConfig", arch, "zoo model 'tiny_vit'")


def load(batch_size: int, **arch: int) -> ZooModel:
    """Build the seeded model and a seeded pixel tensor ``[batch_size, 3, image_size, image_size]``."""
    size = arch["image_size"]
    x = torch.randn(batch_size, 3, size, size, generator=torch.Generator().manual_seed(arch["seed"] + 1))
    return ZooModel(build(**arch), x, "tiny_vit", meta={"num_labels": arch["num_labels"]})
