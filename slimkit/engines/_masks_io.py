"""Pruning mask files: slimkit writes safetensors (never pickle); NNI's ``torch.save``d files are read too.

One place for the format, shared by the pruners (``Pruner.export_model(mask_path=...)``) and the speedup
(``ModelSpeedup(model, dummy_input, masks_file=path)``), so a file one writes the other reads. Keys are
``<layer>.weight_mask`` / ``<layer>.bias_mask`` and the metadata ``format`` is :data:`MASK_FORMAT`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from slimkit.core.io import save_tensors_atomic
from slimkit.engines._io import read_safetensors
from slimkit.errors import SaveLoadError

__all__ = ["MASK_FORMAT", "Masks", "read_mask_file", "save_masks"]

Masks = dict[str, dict[str, "torch.Tensor | None"]]
MASK_FORMAT = "slimkit-pruning-masks"
_SUFFIXES = ("weight_mask", "bias_mask")
_EXPERT_SUFFIXES = ("out_channels", "inner_channels")  # MoE experts modules: kept indices, not masks


def save_masks(masks: Mapping[str, Mapping[str, Any]], path: str | os.PathLike) -> Path:
    """Save masks in :meth:`Pruner.get_masks` format: keys ``<layer>.weight_mask`` / ``<layer>.bias_mask``.

    A MoE experts module's entry holds kept indices instead: ``out_channels`` (hidden rows) and
    ``inner_channels`` (``[experts, kept]``).
    """
    flat: dict[str, torch.Tensor] = {}
    for name, layer_masks in masks.items():
        for key in _SUFFIXES:
            value = layer_masks.get(key, layer_masks.get(key[: -len("_mask")]))  # NNI 2.x: "weight" / "bias"
            if value is not None:
                flat[f"{name}.{key}"] = value
        for key in _EXPERT_SUFFIXES:
            if layer_masks.get(key) is not None:
                flat[f"{name}.{key}"] = torch.as_tensor(layer_masks[key])
    return save_tensors_atomic(flat, path, MASK_FORMAT)


def _read_safetensors(path: Path) -> Masks:
    fmt, flat = read_safetensors(path, "Mask", "mask_path")
    if fmt not in (None, MASK_FORMAT):
        raise SaveLoadError(f"{str(path)!r} is a {fmt!r} file, not a pruning mask file (format {MASK_FORMAT!r}); "
                            "pass the mask_path given to export_model.")
    masks: Masks = {}
    for key, tensor in flat.items():
        name, _, suffix = key.rpartition(".")
        if suffix not in (*_SUFFIXES, *_EXPERT_SUFFIXES) or not name:
            raise SaveLoadError(f"Mask file {str(path)!r} has an unexpected key {key!r}; keys must end in "
                                "'.weight_mask' or '.bias_mask' (MoE experts: '.out_channels', '.inner_channels').")
        masks.setdefault(name, {"weight_mask": None, "bias_mask": None})[suffix] = tensor
    for name, layer_masks in masks.items():
        if any(layer_masks.get(k) is not None for k in _EXPERT_SUFFIXES):
            del layer_masks["weight_mask"], layer_masks["bias_mask"]
        elif layer_masks["weight_mask"] is None:
            raise SaveLoadError(f"Mask file {str(path)!r} has a bias_mask but no weight_mask for {name!r}.")
    return masks


def read_mask_file(path: str | os.PathLike) -> Masks:
    """Read a mask file: slimkit's safetensors, or NNI's ``torch.save``d dict (loaded with ``weights_only=True``).

    Either way the result maps layer names to ``{"weight_mask": T, "bias_mask": T | None}``.
    """
    file = Path(path)
    if not file.is_file():
        raise SaveLoadError(f"Mask file {str(path)!r} does not exist; pass the mask_path export_model wrote "
                            "(or a mask dict).")
    with open(file, "rb") as handle:
        zipped = handle.read(2) == b"PK"  # torch.save's format is a zip archive
    if not zipped:
        return _read_safetensors(file)
    try:  # NNI writes masks with torch.save; weights_only refuses anything but tensors and plain containers
        loaded = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a foreign file
        raise SaveLoadError(f"Mask file {str(path)!r} is not a readable safetensors file nor a tensor-only torch "
                            f"file ({type(exc).__name__}: {exc}).") from exc
    if not isinstance(loaded, Mapping):
        raise SaveLoadError(f"Mask file {str(path)!r} holds a {type(loaded).__name__}, not a mask dict "
                            "{layer: {'weight': Tensor, 'bias': Tensor | None}}.")
    out: Masks = {}
    for name, entry in loaded.items():
        if not isinstance(entry, Mapping):
            raise SaveLoadError(f"Mask file {str(path)!r}: entry {name!r} is a {type(entry).__name__}, not a dict.")
        out[str(name)] = {"weight_mask": entry.get("weight_mask", entry.get("weight")),
                          "bias_mask": entry.get("bias_mask", entry.get("bias"))}
    return out
