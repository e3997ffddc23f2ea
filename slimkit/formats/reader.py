"""Read another tool's quantized Hugging Face folder (compressed-tensors or GPTQ) onto slimkit's packed layers.

:func:`read_quantization_config` tells the format from ``config.json`` (refusing unknown methods and damaged
configs with the field named); :func:`load_into` takes a skeleton of the architecture (built by the caller, e.g.
with parameters on the meta device), swaps every quantized Linear for a :class:`PackedLinear` built from the
checkpoint's tensors (no re-quantization: the codes, scales and zero points are the checkpoint's) and assigns
every float tensor. Nothing is dequantized.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from slimkit.engines.quantization.lowbit.linear import PackedLinear
from slimkit.formats.hf_format import HFCheckpointFormat
from slimkit.formats.kinds import FormatError, symmetric_grid
from slimkit.formats.scheme import WeightScheme


def read_quantization_config(folder: str | os.PathLike,
                             methods: dict[str, str]) -> tuple[str | None, dict[str, Any]]:
    """``(format name, quantization_config)`` of a Hugging Face folder; ``(None, {})`` when it is not quantized.

    ``methods`` maps the ``quant_method`` values slimkit reads to their format names; a ``quantization_config`` of
    another method (bitsandbytes, fp8...) or a damaged one is a FormatError.
    """
    file = Path(folder) / "config.json"
    try:
        config = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"{file} cannot be read as JSON ({exc}).") from exc
    qc = config.get("quantization_config") if isinstance(config, dict) else None
    if qc is None:
        return None, {}
    if not isinstance(qc, dict):
        raise FormatError(f"{file}: quantization_config is a {type(qc).__name__}; it must be an object.")
    method = qc.get("quant_method")
    if method not in methods:
        raise FormatError(f"{file}: quantization_config.quant_method = {method!r}: slimkit imports "
                          f"{', '.join(repr(m) for m in methods)} checkpoints.")
    return methods[method], qc


def weight_files(folder: str | os.PathLike) -> list[Path]:
    """The safetensors files of a folder (from the index when there is one)."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise FormatError(f"{index} is not a valid safetensors index ({exc}).") from exc
        files = [folder / n for n in names]
    else:
        files = sorted(folder.glob("*.safetensors"))
    missing = [str(f) for f in files if not f.is_file()]
    if not files or missing:
        raise FormatError(f"{folder} has no safetensors weights{(': missing ' + ', '.join(missing)) if missing else ''}"
                          "; slimkit imports safetensors checkpoints.")
    return files


def read_tensors(folder: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's safetensors files, by checkpoint name."""
    tensors: dict[str, torch.Tensor] = {}
    for file in weight_files(folder):
        try:
            with safe_open(str(file), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                    tensors[key] = handle.get_tensor(key)
        except (SafetensorError, OSError) as exc:
            raise FormatError(f"{file} cannot be read ({exc}): truncated or corrupt.") from exc
    return tensors


def _take(tensors: dict[str, torch.Tensor], name: str) -> dict[str, torch.Tensor]:
    prefix = f"{name}."
    keys = [k for k in tensors if k.startswith(prefix) and "." not in k[len(prefix):]]
    return {k[len(prefix):]: tensors.pop(k) for k in keys}


def load_into(model: nn.Module, folder: str | os.PathLike, fmt: HFCheckpointFormat, qc: dict[str, Any],
              dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Swap the quantized Linears of skeleton ``model`` for PackedLinear and assign every other tensor.

    Returns ``{"layers": {name: spec}, "schemes": {name: description}, "warnings": [...]}``. The skeleton's float
    parameters may be on the meta device; all must be in the checkpoint (a tied lm_head is re-tied).
    """
    tensors = read_tensors(folder)
    layers = fmt.quantized_layers(model, qc, set(tensors))
    if not layers:
        raise FormatError(f"{folder}: the checkpoint has a {fmt.name} quantization_config but no quantized layer "
                          f"tensors; it is damaged or not a {fmt.name} checkpoint.")
    notes: list[str] = []
    specs, schemes = {}, {}
    for name, how in layers.items():
        local = _take(tensors, name)
        layer = fmt.layer_from_tensors(local, how, name, dtype, notes)
        model.set_submodule(name, layer)
        specs[name] = layer.spec()
        schemes[name] = WeightScheme(layer.bits, None if layer.scales.shape[1] == 1 else layer.group_size,
                                     symmetric_grid(layer)).describe()
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}
    result = model.load_state_dict(state, strict=False, assign=True)
    tied = _tied_names(model)
    missing = [k for k in result.missing_keys if k not in tied and not _is_packed_key(model, k)]
    if missing or result.unexpected_keys:
        raise FormatError(f"{folder}: the weights do not fit the config's architecture: missing "
                          f"{missing[:5]}, unexpected {result.unexpected_keys[:5]}.")
    if callable(getattr(model, "tie_weights", None)):
        model.tie_weights()
    if notes:
        warnings.warn(f"{len(notes)} layer(s) had scales that float16 cannot hold exactly: {notes[0]}"
                      f"{' ...' if len(notes) > 1 else ''}", RuntimeWarning, stacklevel=2)
    return {"layers": specs, "schemes": schemes, "warnings": notes}


def _tied_names(model: nn.Module) -> set[str]:
    config = getattr(model, "config", None)
    if not getattr(config, "tie_word_embeddings", False):
        return set()
    out = getattr(model, "get_output_embeddings", lambda: None)()
    return {f"{n}.weight" for n, m in model.named_modules() if m is out and out is not None}


def _is_packed_key(model: nn.Module, key: str) -> bool:
    owner = key.rpartition(".")[0]
    try:
        return isinstance(model.get_submodule(owner), PackedLinear)
    except AttributeError:
        return False


__all__ = ["load_into", "read_quantization_config", "read_tensors", "weight_files"]
