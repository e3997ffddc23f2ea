"""Saving and loading pruned weights and masks as safetensors (never pickle), with atomic writes."""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from slimkit.errors import SaveLoadError
from slimkit.utils import run_model

Masks = dict[str, dict[str, "torch.Tensor | None"]]
MASK_FORMAT = "slimkit-pruning-masks"
MODEL_FORMAT = "slimkit-pruned-state-dict"
_SUFFIXES = ("weight_mask", "bias_mask")


def save_tensors_atomic(tensors: Mapping[str, torch.Tensor], path: str | os.PathLike, fmt: str) -> Path:
    """Write ``tensors`` to ``path`` as safetensors through a temp file + ``os.replace``.

    Tensors are copied to contiguous CPU memory first, which also breaks storage sharing (tied weights),
    something safetensors refuses to write.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    plain = {name: t.detach().to("cpu").contiguous().clone() for name, t in tensors.items()}
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        save_file(plain, tmp, metadata={"format": fmt})
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return target


def save_masks(masks: Masks, path: str | os.PathLike) -> Path:
    """Save masks in :meth:`Pruner.get_masks` format: keys ``<layer>.weight_mask`` / ``<layer>.bias_mask``."""
    flat: dict[str, torch.Tensor] = {}
    for name, layer_masks in masks.items():
        for key in _SUFFIXES:
            value = layer_masks.get(key)
            if value is not None:
                flat[f"{name}.{key}"] = value
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
                "'.weight_mask' or '.bias_mask'."
            )
        masks.setdefault(name, {"weight_mask": None, "bias_mask": None})[suffix] = tensor
    for name, layer_masks in masks.items():
        if layer_masks["weight_mask"] is None:
            raise SaveLoadError(f"Mask file {str(mask_path)!r} has a bias_mask but no weight_mask for {name!r}.")
    return masks


def load_state_dict_file(model_path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Read a pruned model's weights written by :meth:`Pruner.export_model` (a plain state dict)."""
    return _read(model_path, "Model")


def export_onnx(model: torch.nn.Module, dummy_input: Any, path: str | os.PathLike) -> Path:
    """Export ``model`` (in eval mode) to ONNX at ``path`` atomically, tracing it on ``dummy_input``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    model.eval()
    if isinstance(dummy_input, Mapping):
        args, kwargs = (), dict(dummy_input)
    else:
        args, kwargs = (tuple(dummy_input) if isinstance(dummy_input, (tuple, list)) else (dummy_input,)), None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".onnx", dir=target.parent)
    os.close(fd)
    try:
        run_model(model, dummy_input)  # fail early with the model's own error if the input does not fit
        with warnings.catch_warnings():  # the TorchScript exporter is deprecated, but fast and quiet
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(model, args, tmp, kwargs=kwargs, dynamo=False)
        os.replace(tmp, target)
    except Exception as exc:
        raise SaveLoadError(f"ONNX export to {str(target)!r} failed: {exc}") from exc
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target
