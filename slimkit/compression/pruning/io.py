"""Saving and loading pruned weights and masks as safetensors (never pickle), with atomic writes.

The atomic writers themselves live in :mod:`slimkit.compression._io` (shared with quantization); they are
re-exported here for existing imports.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from slimkit.compression._io import export_onnx
from slimkit.core.io import save_tensors_atomic
from slimkit.errors import SaveLoadError

__all__ = [
    "MASK_FORMAT", "MODEL_FORMAT", "Masks", "export_onnx", "load_masks", "load_state_dict_file", "save_masks",
    "save_tensors_atomic",
]

Masks = dict[str, dict[str, "torch.Tensor | None"]]
MASK_FORMAT = "slimkit-pruning-masks"
MODEL_FORMAT = "slimkit-pruned-state-dict"
_SUFFIXES = ("weight_mask", "bias_mask", "out_channels", "inner_channels")  # the last two: MoE experts modules


def save_masks(masks: Masks, path: str | os.PathLike) -> Path:
    """Save masks in :meth:`Pruner.get_masks` format: keys ``<layer>.weight_mask`` / ``<layer>.bias_mask``.

    A MoE experts module's entry holds kept indices instead: ``out_channels`` (hidden rows) and
    ``inner_channels`` (``[experts, kept]``).
    """
    flat: dict[str, torch.Tensor] = {}
    for name, layer_masks in masks.items():
        for key in _SUFFIXES:
            value = layer_masks.get(key)
            if value is not None:
                flat[f"{name}.{key}"] = torch.as_tensor(value)
    return save_tensors_atomic(flat, path, MASK_FORMAT)


def _read(path: str | os.PathLike, what: str) -> dict[str, torch.Tensor]:
    if not Path(path).is_file():
        raise SaveLoadError(f"{what} file {str(path)!r} does not exist; pass the path export_model wrote.")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise SaveLoadError(
            f"{what} file {str(path)!r} is not a readable safetensors file ({exc}); "
            "it must be written by Pruner.export_model."
        ) from exc


def load_masks(mask_path: str | os.PathLike) -> Masks:
    """Read masks written by :meth:`Pruner.export_model` back into :meth:`Pruner.get_masks` format."""
    flat = _read(mask_path, "Mask")
    masks: Masks = {}
    for key, tensor in flat.items():
        name, _, suffix = key.rpartition(".")
        if suffix not in _SUFFIXES or not name:
            raise SaveLoadError(
                f"Mask file {str(mask_path)!r} has an unexpected key {key!r}; keys must end in "
                "'.weight_mask' or '.bias_mask' (MoE experts: '.out_channels', '.inner_channels')."
            )
        masks.setdefault(name, {"weight_mask": None, "bias_mask": None})[suffix] = tensor
    for name, layer_masks in masks.items():
        if layer_masks.get("out_channels") is not None or layer_masks.get("inner_channels") is not None:
            del layer_masks["weight_mask"], layer_masks["bias_mask"]
        elif layer_masks["weight_mask"] is None:
            raise SaveLoadError(f"Mask file {str(mask_path)!r} has a bias_mask but no weight_mask for {name!r}.")
    return masks


def load_state_dict_file(model_path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Read a pruned model's weights written by :meth:`Pruner.export_model` (a plain state dict)."""
    return _read(model_path, "Model")
