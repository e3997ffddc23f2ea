"""Atomic file writing shared by every compression family: safetensors state dicts and ONNX graphs.

Both writers go through a temporary file in the target folder and ``os.replace``, so a crash never leaves a
half-written file under the final name.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from slimkit.errors import SaveLoadError
from slimkit.utils import run_model

__all__ = ["export_onnx", "save_tensors_atomic"]


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
