"""The files beside a saved SmashConfig: example inputs (safetensors) and tokenizers/processors (local folders)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from slimkit.core.io import save_tensors_atomic
from slimkit.errors import ConfigError


def save_inputs(inputs: Any, path: Path) -> None:
    """Store example inputs as safetensors; the key prefix records the form (kwargs, positional, single)."""
    if isinstance(inputs, torch.Tensor):
        tensors, kind = {"x": inputs}, "tensor"
    elif isinstance(inputs, Mapping):
        tensors, kind = dict(inputs), "kwargs"
    else:
        tensors, kind = {str(i): t for i, t in enumerate(inputs)}, "args"
    save_tensors_atomic(tensors, path, metadata={"kind": kind})


def load_inputs(path: Path) -> Any:
    """Read example inputs written by ``save_to_json`` back in their original form."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        kind = (fh.metadata() or {}).get("kind", "kwargs")
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    if kind == "tensor":
        return tensors["x"]
    if kind == "args":
        return tuple(tensors[str(i)] for i in range(len(tensors)))
    return tensors


def load_pretrained(auto_class: str, source: str | os.PathLike, what: str) -> Any:
    """``transformers.<auto_class>.from_pretrained(source)`` for a local folder, or a ConfigError saying why not."""
    import transformers

    try:
        return getattr(transformers, auto_class).from_pretrained(str(source))
    except Exception as exc:
        raise ConfigError(
            f"Could not load a {what} from {str(source)!r}: {exc.__class__.__name__}. A hub id needs network "
            f"access, which slimkit never assumes; pass a local folder or an already-loaded {what} object."
        ) from exc
