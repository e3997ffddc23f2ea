"""Devices: what a device spec means, moving whatever a model or block is called with, accumulators per device.

One rule for every algorithm: inputs follow the model. :func:`move_inputs` moves every tensor of a call's
arguments, nested tuples, lists and dicts included (a Llama block's ``position_embeddings=(cos, sin)``, attention
masks, cache positions), to the device of the weights that will read them; accumulators are made with
``device=`` the weights' device and :func:`accumulator_dtype` of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from slimkit.errors import ConfigError

__all__ = ["accumulator_dtype", "is_available", "move_inputs", "parse_device", "resolve_device"]

#: what ``device`` may be besides the devices torch names
AUTO = "auto"


def parse_device(device: str | torch.device | None) -> torch.device:
    """The ``torch.device`` a spec names: ``None``/``"auto"`` is CUDA when present, else the CPU.

    Any spec torch accepts is accepted ("cpu", "cuda", "cuda:1", "mps", a backend a library registered); anything
    else raises a ConfigError that lists the usual spellings.
    """
    if device is None or device == AUTO:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise ConfigError(f"A device is a string ('auto', 'cpu', 'cuda', 'cuda:N', 'mps') or a torch.device; got "
                          f"{type(device).__name__} {device!r}.")
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise ConfigError(f"Unknown device {device!r}: torch says {str(exc).splitlines()[0]!r}. Use 'auto', 'cpu', "
                          "'cuda', 'cuda:N' or 'mps'.") from None


def resolve_device(device: str | torch.device | None) -> str:
    """:func:`parse_device` as the string a config stores (``"cpu"``, ``"cuda"``, ``"cuda:1"``...)."""
    return str(parse_device(device))


def is_available(device: str | torch.device) -> bool:
    """True when tensors can live on ``device`` in this process (the CPU and meta always; others as torch says).

    A device torch cannot parse, or whose backend is not registered here, is not available (False, no error).
    """
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        return False
    if kind in ("cpu", "meta"):
        return True
    try:
        return bool(torch.get_device_module(kind).is_available())
    except (RuntimeError, AttributeError):
        return False


def move_inputs(inputs: Any, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Any:
    """Move every tensor in ``inputs`` to ``device``; floating tensors are also cast to ``dtype`` when given.

    ``inputs`` is a tensor or any nesting of tuples (named ones too), lists and mappings (returned as dicts);
    other values are returned as they are. Tensors already there are returned themselves (no copy).
    """
    if isinstance(inputs, torch.Tensor):
        if dtype is not None and inputs.is_floating_point():
            inputs = inputs.to(dtype)
        return inputs.to(device) if device is not None else inputs
    if isinstance(inputs, Mapping):
        return {k: move_inputs(v, device, dtype) for k, v in inputs.items()}
    if isinstance(inputs, tuple) and hasattr(inputs, "_fields"):  # a named tuple takes its fields positionally
        return type(inputs)(*(move_inputs(v, device, dtype) for v in inputs))
    if isinstance(inputs, (tuple, list)):
        return type(inputs)(move_inputs(v, device, dtype) for v in inputs)
    return inputs


def accumulator_dtype(device: torch.device | str) -> torch.dtype:
    """The dtype for sums over many values on ``device``: float64, or float32 where the device has no float64 (MPS)."""
    return torch.float32 if torch.device(device).type == "mps" else torch.float64
