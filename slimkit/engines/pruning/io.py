"""Saving and loading pruned weights and masks as safetensors (never pickle), with atomic writes.

The atomic writers themselves live in :mod:`slimkit.engines._io` (shared with quantization); they are
re-exported here for existing imports.
"""

from __future__ import annotations

import os

import torch

from slimkit.core.io import save_tensors_atomic
from slimkit.engines._io import export_onnx, read_safetensors
from slimkit.engines._masks_io import MASK_FORMAT, Masks, read_mask_file, save_masks

__all__ = [
    "MASK_FORMAT", "MODEL_FORMAT", "Masks", "export_onnx", "load_masks", "load_state_dict_file", "save_masks",
    "save_tensors_atomic",
]

MODEL_FORMAT = "slimkit-pruned-state-dict"


def load_masks(mask_path: str | os.PathLike) -> Masks:
    """Read masks written by :meth:`Pruner.export_model` back into :meth:`Pruner.get_masks` format."""
    return read_mask_file(mask_path)


def load_state_dict_file(model_path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Read a pruned model's weights written by :meth:`Pruner.export_model` (a plain state dict)."""
    return read_safetensors(model_path, "Model", "model_path")[1]
