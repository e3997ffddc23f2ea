"""Saving and loading quantization calibration (bits, scales, zero points) as safetensors, atomically.

File layout: one tensor per ``<layer>.<type>_scale`` / ``<layer>.<type>_zero_point``, a 0-d int64 tensor per
``<layer>.<type>_bits`` and a 0-d float tensor per ``<layer>.tracked_min_<type>`` / ``tracked_max_<type>`` (the
activation ranges, NNI 2.x's keys); the metadata ``format`` names the file kind.
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

Calibration = dict[str, dict[str, Any]]
CALIBRATION_FORMAT = "slimkit-quant-calibration"
MODEL_FORMAT = "slimkit-quantized-state-dict"
_FIELDS = tuple(f"{t}_{f}" for t in ("weight", "input", "output") for f in ("bits", "scale", "zero_point")) + \
    tuple(f"tracked_{m}_{t}" for t in ("input", "output") for m in ("min", "max"))  # NNI 2.x's range keys


def save_calibration(calibration: Mapping[str, Mapping[str, Any]], path: str | os.PathLike, fmt: str) -> Path:
    """Write ``calibration`` (``{layer: {"<type>_bits": int, "<type>_scale": Tensor, ...}}``) to ``path``."""
    flat: dict[str, torch.Tensor] = {}
    for layer, entry in calibration.items():
        for field, value in entry.items():
            if field not in _FIELDS:
                raise SaveLoadError(
                    f"Calibration field {field!r} of layer {layer!r} is not one of {', '.join(_FIELDS)}."
                )
            if field.endswith("_bits"):
                value = torch.tensor(int(value))
            elif field.startswith("tracked_"):
                value = torch.tensor(float(value))
            flat[f"{layer}.{field}"] = value
    return save_tensors_atomic(flat, path, fmt)


def load_calibration(path: str | os.PathLike) -> Calibration:
    """Read a calibration file written by ``Quantizer.export_model`` (bits come back as ints)."""
    fmt, flat = read_safetensors(path, "Calibration", "path")
    if fmt != CALIBRATION_FORMAT:
        raise SaveLoadError(
            f"{str(path)!r} is a {fmt or 'foreign'} file, not a quantization calibration file "
            f"(format {CALIBRATION_FORMAT!r}); pass the calibration_path given to export_model."
        )
    result: Calibration = {}
    for key, tensor in flat.items():
        layer, _, field = key.rpartition(".")
        if field not in _FIELDS or not layer:
            raise SaveLoadError(f"Calibration file {str(path)!r} has an unexpected key {key!r}.")
        value: Any = tensor
        if field.endswith("_bits"):
            value = int(tensor)
        elif field.startswith("tracked_"):
            value = float(tensor)
        result.setdefault(layer, {})[field] = value
    return result
