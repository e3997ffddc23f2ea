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

from slimkit.compression.formats import compressed_tensors as ct
from slimkit.compression.formats import gptq
from slimkit.compression.formats.scheme import COMPRESSED_TENSORS, GPTQ, FormatError, WeightScheme
from slimkit.compression.quantization.lowbit.layers import replace_module
from slimkit.compression.quantization.lowbit.linear import PackedLinear

#: ``quant_method`` values slimkit imports
QUANT_METHODS = {ct.QUANT_METHOD: COMPRESSED_TENSORS, gptq.QUANT_METHOD: GPTQ}


def read_quantization_config(folder: str | os.PathLike) -> tuple[str | None, dict[str, Any]]:
    """``(format, quantization_config)`` of a Hugging Face folder; ``(None, {})`` when it is not quantized.

    A ``quantization_config`` of another method (awq, bitsandbytes, fp8...) or a damaged one is a FormatError.
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
    if method not in QUANT_METHODS:
        raise FormatError(f"{file}: quantization_config.quant_method = {method!r}: slimkit imports "
                          f"{', '.join(repr(m) for m in QUANT_METHODS)} checkpoints.")
    return QUANT_METHODS[method], qc


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


def quantized_layers(model: nn.Module, fmt: str, qc: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """``{Linear name: how to read it}`` (a WeightScheme for compressed-tensors, ``(bits, v1)`` for GPTQ)."""
    linears = [n for n, m in model.named_modules() if n and isinstance(m, nn.Linear)]
    if fmt == GPTQ:
        how = gptq.parse_config(qc)
        return {n: how for n in linears if gptq.is_gptq_layer(names, n)}
    groups, ignore = ct.parse_config(qc)
    matched = ct.match_layers(model, groups, ignore)
    stored = {n for n in linears if ct.is_ct_layer(names, n)}
    if matched.keys() != stored:
        odd = sorted(set(matched) ^ stored)
        raise FormatError(f"quantization_config targets and the stored tensors disagree on {', '.join(odd[:5])}: "
                          "the config (config_groups / ignore) does not describe these weights.")
    return matched


def load_into(model: nn.Module, folder: str | os.PathLike, fmt: str, qc: dict[str, Any],
              dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Swap the quantized Linears of skeleton ``model`` for PackedLinear and assign every other tensor.

    Returns ``{"layers": {name: spec}, "schemes": {name: description}, "warnings": [...]}``. The skeleton's float
    parameters may be on the meta device; all must be in the checkpoint (a tied lm_head is re-tied).
    """
    tensors = read_tensors(folder)
    layers = quantized_layers(model, fmt, qc, set(tensors))
    if not layers:
        raise FormatError(f"{folder}: the checkpoint has a {fmt} quantization_config but no quantized layer "
                          "tensors; it is damaged or not a {fmt} checkpoint.")
    notes: list[str] = []
    specs, schemes = {}, {}
    for name, how in layers.items():
        local = _take(tensors, name)
        if fmt == GPTQ:
            bits, v1 = how
            layer = gptq.layer_from_tensors(local, bits, name, v1, dtype)
        else:
            layer = ct.layer_from_tensors(local, how, name, dtype, notes)
        replace_module(model, name, layer)
        specs[name] = layer.spec()
        sym = bool((layer.zeros.float() == (1 << (layer.bits - 1))).all())
        schemes[name] = WeightScheme(layer.bits, None if layer.scales.shape[1] == 1 else layer.group_size,
                                     sym).describe()
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


__all__ = ["QUANT_METHODS", "load_into", "quantized_layers", "read_quantization_config", "read_tensors",
           "weight_files"]
