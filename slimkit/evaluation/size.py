"""Size of a model on disk, measured by really writing it (safetensors, no pickle) and summing file sizes."""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from slimkit.core.tensors import flatten_state_dict
from slimkit.errors import ModelNotSupportedError, SaveLoadError

#: Saved alongside a model but not part of what compression shrinks: left out of size_on_disk.
_NOT_MODEL = ("tokenizer", "processor", "example_inputs.safetensors", "README.md")


def _dedup(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keep each distinct tensor once; give partial views of one storage their own contiguous copy."""
    seen_views: set[tuple] = set()
    seen_storages: set[tuple] = set()
    out: dict[str, torch.Tensor] = {}
    for key in sorted(tensors):
        t = tensors[key]
        if t.device.type == "meta":
            raise ModelNotSupportedError(f"Tensor {key!r} is on the meta device: it has no data to measure.")
        ptr = t.untyped_storage().data_ptr() if t.numel() else 0
        view = (t.device.type, t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if ptr and view in seen_views:
            continue  # a tied / shared tensor is stored once
        storage = (t.device.type, ptr)
        if ptr and storage in seen_storages:
            t = t.clone()
        seen_views.add(view)
        seen_storages.add(storage)
        out[key] = t.contiguous()
    return out


def state_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Deduplicated tensors that represent ``model``'s weights as slimkit saves them."""
    return _dedup(flatten_state_dict(model))


def state_bytes(model: nn.Module) -> int:
    """Bytes held by ``model``'s weights (deduplicated, quantized weights at their integer width)."""
    return sum(t.numel() * t.element_size() for t in state_tensors(model).values())


def _safetensors_size(model: nn.Module, folder: Path) -> int:
    from safetensors.torch import save_file

    tensors = {k: v.cpu() for k, v in state_tensors(model).items()}
    target = folder / "model.safetensors"
    save_file(tensors, str(target))
    return os.path.getsize(target)


def size_on_disk(model: Any) -> int:
    """Bytes ``model`` takes on disk, measured by writing it to a temporary directory.

    Objects with ``save_pretrained(path)`` (Hugging Face models, SmashedModel) are saved with it and the
    written files summed, leaving out the tokenizer, processor, example inputs and model card (README.md)
    saved beside the weights.
    Other modules are written as one ``.safetensors`` file of their deduplicated
    tensors (tied weights once, quantized weights as integers + scales). If ``save_pretrained`` fails on an
    ``nn.Module`` (e.g. a Hugging Face model holding packed quantized layers), the safetensors measurement
    is used instead, with a warning.
    """
    saver = getattr(model, "save_pretrained", None)
    with tempfile.TemporaryDirectory(prefix="slimkit-size-") as tmp:
        folder = Path(tmp)
        if callable(saver):
            try:
                saver(str(folder / "saved"))
                return sum(p.stat().st_size for p in (folder / "saved").rglob("*")
                           if p.is_file() and p.relative_to(folder / "saved").parts[0] not in _NOT_MODEL)
            except Exception as exc:
                if not isinstance(model, nn.Module):
                    raise SaveLoadError(
                        f"size_on_disk could not save a {type(model).__name__} with save_pretrained: {exc}. "
                        "Fix the save error, or pass the underlying torch.nn.Module."
                    ) from exc
                warnings.warn(
                    f"save_pretrained failed ({type(exc).__name__}: {exc}); measuring size_on_disk as "
                    "safetensors of the module's tensors instead.",
                    RuntimeWarning,
                    stacklevel=2,
                )
                folder = folder / "fallback"
                folder.mkdir()
        if not isinstance(model, nn.Module):
            raise ModelNotSupportedError(
                f"size_on_disk needs a torch.nn.Module or an object with save_pretrained(path), "
                f"got {type(model).__name__}."
            )
        return _safetensors_size(model, folder)
