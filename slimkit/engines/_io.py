"""Files every compression family shares: ONNX export (atomic: a crash never leaves half a file), safetensors reads."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from slimkit.core.io import atomic_file
from slimkit.errors import SaveLoadError
from slimkit.utils import run_model

__all__ = ["export_onnx", "read_safetensors"]


def export_onnx(model: torch.nn.Module, dummy_input: Any, path: str | os.PathLike) -> Path:
    """Export ``model`` (in eval mode) to ONNX at ``path`` atomically, tracing it on ``dummy_input``."""
    target = Path(path)
    model.eval()
    if isinstance(dummy_input, Mapping):
        args, kwargs = (), dict(dummy_input)
    else:
        args, kwargs = (tuple(dummy_input) if isinstance(dummy_input, (tuple, list)) else (dummy_input,)), None
    try:
        with atomic_file(target, suffix=".onnx") as tmp:
            run_model(model, dummy_input)  # fail early with the model's own error if the input does not fit
            with warnings.catch_warnings():  # the TorchScript exporter is deprecated, but fast and quiet
                warnings.simplefilter("ignore", DeprecationWarning)
                torch.onnx.export(model, args, str(tmp), kwargs=kwargs, dynamo=False)
    except Exception as exc:
        raise SaveLoadError(f"ONNX export to {str(target)!r} failed: {exc}") from exc
    return target


def read_safetensors(path: str | os.PathLike, what: str, hint: str) -> tuple[str | None, dict[str, torch.Tensor]]:
    """``(metadata "format", tensors)`` of safetensors file ``path``, or a SaveLoadError naming the ``what`` file.

    ``hint`` completes the message for a missing file: "pass the ``hint`` export_model wrote".
    """
    if not Path(path).is_file():
        raise SaveLoadError(f"{what} file {str(path)!r} does not exist; pass the {hint} export_model wrote.")
    try:
        with safe_open(str(path), framework="pt") as handle:
            return (handle.metadata() or {}).get("format"), {key: handle.get_tensor(key) for key in handle.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise SaveLoadError(f"{what} file {str(path)!r} is not a readable safetensors file ({exc}).") from exc
