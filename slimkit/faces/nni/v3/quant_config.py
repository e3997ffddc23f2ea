"""NNI 3.0's quantization ``config_list`` keys, translated once into slimkit's (NNI 1.x/2.x) quantization config.

An entry selects modules as a pruning entry does (``op_names``, ``op_names_re``, ``op_types``, the ``exclude_*``
keys) and says what to quantize: ``target_names`` (``"weight"``, ``"_input_"``, ``"_output_"``), ``quant_dtype``
(``"int8"``, ``"uint8"``, ``"int4"``...: the bit width), ``quant_scheme`` (``"affine"`` / ``"symmetric"``) and
``granularity`` (``"default"`` / ``"per_tensor"``), directly or per target in ``target_settings``. The result is
``{"quant_types", "quant_bits", "op_names", "op_types"}`` entries, one per NNI 3.0 entry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.errors import closest
from slimkit.faces.nni.v3.config import select_modules

__all__ = ["QUANT_V3_KEYS", "quant_config_from_v3"]

_SELECT = ("op_names", "op_names_re", "op_types", "exclude_op_names", "exclude_op_names_re", "exclude_op_types")
_SETTINGS = ("quant_dtype", "quant_scheme", "granularity")
#: every key an NNI 3.0 quantization entry may carry here
QUANT_V3_KEYS = (*_SELECT, "target_names", "target_settings", *_SETTINGS)
_TARGETS = {"weight": "weight", "_input_": "input", "_output_": "output"}
_SCHEMES = ("affine", "symmetric", None)
_GRANULARITIES = ("default", "per_tensor")


def _bits(dtype: Any, where: str) -> int:
    found = re.fullmatch(r"u?int(\d+)", dtype) if isinstance(dtype, str) else None
    if found is None or not 1 <= int(found.group(1)) <= 16:
        raise QuantizationConfigError(f"{where} must be 'int<bits>' or 'uint<bits>' with 1..16 bits (e.g. 'int8'), "
                                      f"got {dtype!r}.")
    return int(found.group(1))


def _settings(entry: Mapping[str, Any], target: str, where: str) -> int:
    """The bit width of ``target``, after checking its scheme and granularity."""
    per_target = entry.get("target_settings", {}).get(target, {})
    if not isinstance(per_target, Mapping) or any(k not in _SETTINGS for k in per_target):
        raise QuantizationConfigError(f"{where}['target_settings'][{target!r}] must be a dict of "
                                      f"{', '.join(_SETTINGS)}, got {per_target!r}.")
    merged = {k: entry[k] for k in _SETTINGS if k in entry} | dict(per_target)
    if merged.get("quant_scheme") not in _SCHEMES:
        raise QuantizationConfigError(f"{where} quant_scheme of {target!r} must be 'affine' or 'symmetric', got "
                                      f"{merged.get('quant_scheme')!r}.")
    if merged.get("granularity", "default") not in _GRANULARITIES:
        raise QuantizationConfigError(f"{where} granularity of {target!r} must be 'default' or 'per_tensor' (slimkit's "
                                      f"observer quantizer keeps one scale per tensor), got {merged['granularity']!r}.")
    if "quant_dtype" not in merged:
        raise QuantizationConfigError(f"{where} gives no quant_dtype for {target!r} (e.g. 'int8').")
    return _bits(merged["quant_dtype"], f"{where} quant_dtype of {target!r}")


def quant_config_from_v3(model: nn.Module, config_list: Any, default_types: Sequence[str],
                         who: str = "quantizer") -> list[dict[str, Any]]:
    """Translate an NNI 3.0 quantization ``config_list`` for ``model`` (see the module docstring)."""
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence) or not config_list:
        raise QuantizationConfigError(f"{who} config_list must be a non-empty list of dicts, e.g. [{{'op_types': "
                                      "['Linear'], 'target_names': ['weight', '_input_'], 'quant_dtype': 'int8'}].")
    out: list[dict[str, Any]] = []
    types = {n: type(m).__name__ for n, m in model.named_modules() if n}
    for index, entry in enumerate(config_list):
        where = f"config_list[{index}]"
        if not isinstance(entry, Mapping):
            raise QuantizationConfigError(f"{where} must be a dict, got {type(entry).__name__}.")
        unknown = [k for k in entry if k not in QUANT_V3_KEYS]
        if unknown:
            hint = " Module fusion (fuse_names) is not offered yet." if unknown[0] == "fuse_names" else ""
            raise QuantizationConfigError(f"{where} has unknown key {unknown[0]!r}.{closest(unknown[0], QUANT_V3_KEYS)}"
                                          f"{hint} NNI 3.0's quantization keys: {', '.join(QUANT_V3_KEYS)}.")
        targets = entry.get("target_names")
        if isinstance(targets, str) or not isinstance(targets, Sequence) or not targets or \
                any(t not in _TARGETS for t in targets):
            raise QuantizationConfigError(f"{where}['target_names'] must list some of {', '.join(_TARGETS)}, got "
                                          f"{targets!r}.")
        layers = select_modules(model, entry, default_types, where)
        if not layers:
            continue  # NNI 3.0 skips an entry that selects nothing
        bits = {_TARGETS[t]: _settings(entry, t, where) for t in targets}
        out.append({"quant_types": list(bits), "quant_bits": bits, "op_names": layers,
                    "op_types": sorted({types[n] for n in layers})})
    if not out:
        raise QuantizationConfigError(f"{who}: no entry of config_list selects a layer of the model.")
    return out
