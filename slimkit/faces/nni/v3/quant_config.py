"""NNI 3.0's quantization ``config_list`` keys, translated once into slimkit's (NNI 1.x/2.x) quantization config.

An entry selects modules as a pruning entry does (``op_names``, ``op_names_re``, ``op_types``, the ``exclude_*``
keys) and says what to quantize: ``target_names`` (``"weight"``, ``"_input_"``, ``"_output_"``), ``quant_dtype``
(``"int8"``, ``"uint8"``, ``"int4"``...: the bit width), ``quant_scheme`` (``"affine"`` / ``"symmetric"``) and
``granularity`` (``"default"`` / ``"per_tensor"``; ``"per_channel"`` / ``"out_channel"`` for the weights of a
quantizer with per-channel scales), directly or per target in ``target_settings``. ``fuse_names`` (module fusion,
:mod:`slimkit.faces.nni.v3.fusion`) is read by the quantizer before this translation. The result is
``{"quant_types", "quant_bits", "op_names", "op_types"}`` entries, one per NNI 3.0 entry, plus NNI 2.x's
``quant_scheme`` per type for the quantizers whose grids follow a scheme (QAT). An entry that selects no layer
is skipped with a warning, as NNI does.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.faces.nni.v3.config import check_entry, select_modules

__all__ = ["QUANT_V3_KEYS", "quant_config_from_v3"]

_SELECT = ("op_names", "op_names_re", "op_types", "exclude_op_names", "exclude_op_names_re", "exclude_op_types")
_SETTINGS = ("quant_dtype", "quant_scheme", "granularity")
#: every key an NNI 3.0 quantization entry may carry here
QUANT_V3_KEYS = (*_SELECT, "target_names", "target_settings", *_SETTINGS, "fuse_names")
_TARGETS = {"weight": "weight", "_input_": "input", "_output_": "output"}
_SCHEMES = ("affine", "symmetric", None)
_GRANULARITIES = ("default", "per_tensor")
_CHANNEL_GRANULARITIES = ("per_channel", "out_channel")


def _bits(dtype: Any, where: str) -> int:
    found = re.fullmatch(r"u?int(\d+)", dtype) if isinstance(dtype, str) else None
    if found is None or not 1 <= int(found.group(1)) <= 16:
        raise QuantizationConfigError(f"{where} must be 'int<bits>' or 'uint<bits>' with 1..16 bits (e.g. 'int8'), "
                                      f"got {dtype!r}.")
    return int(found.group(1))


def _settings(entry: Mapping[str, Any], target: str, where: str, per_channel: bool,
              default_dtype: str | None) -> tuple[int, str, dict[str, str]]:
    """``target``'s bit width, NNI 2.x scheme (``per_tensor_affine``...) and NNI 3.0 dtype and scheme, checked."""
    per_target = entry.get("target_settings", {}).get(target, {})
    if not isinstance(per_target, Mapping) or any(k not in _SETTINGS for k in per_target):
        raise QuantizationConfigError(f"{where}['target_settings'][{target!r}] must be a dict of "
                                      f"{', '.join(_SETTINGS)}, got {per_target!r}.")
    merged = {k: entry[k] for k in _SETTINGS if k in entry} | dict(per_target)
    if merged.get("quant_scheme") not in _SCHEMES:
        raise QuantizationConfigError(f"{where} quant_scheme of {target!r} must be 'affine' or 'symmetric', got "
                                      f"{merged.get('quant_scheme')!r}.")
    granularity = merged.get("granularity", "default")
    channel = granularity in _CHANNEL_GRANULARITIES
    if granularity not in _GRANULARITIES and not (per_channel and channel):
        also = " ('per_channel' / 'out_channel' for weights)" if per_channel else ""
        raise QuantizationConfigError(f"{where} granularity of {target!r} must be 'default' or 'per_tensor'{also} "
                                      f"(this quantizer keeps one scale per tensor), got {granularity!r}.")
    if channel and target != "weight":
        warnings.warn(f"{where}: granularity {granularity!r} of {target!r} is taken per tensor: slimkit quantizes "
                      "activations with one scale (per-channel scales are for weights).", UserWarning, stacklevel=4)
        channel = False
    if merged.get("quant_dtype") is None:
        if default_dtype is None:
            raise QuantizationConfigError(f"{where} gives no quant_dtype for {target!r} (e.g. 'int8').")
        merged["quant_dtype"] = default_dtype  # NNI 3.0's BNN examples give quant_dtype None: one bit
    kind = "symmetric" if merged.get("quant_scheme") == "symmetric" else "affine"
    given = {"quant_dtype": merged["quant_dtype"], "quant_scheme": merged.get("quant_scheme") or "affine"}
    return _bits(merged["quant_dtype"], f"{where} quant_dtype of {target!r}"), \
        f"{'per_channel' if channel else 'per_tensor'}_{kind}", given


def quant_config_from_v3(model: nn.Module, config_list: Any, default_types: Sequence[str], who: str = "quantizer",
                         schemes: bool = False,
                         record: dict[str, dict[str, dict[str, str]]] | None = None,
                         default_dtype: str | None = None) -> list[dict[str, Any]]:
    """Translate an NNI 3.0 quantization ``config_list`` for ``model`` (see the module docstring).

    ``schemes``: the quantizer's grids follow NNI 2.x's ``quant_scheme`` (QAT): weights may then be per channel
    and each entry carries ``quant_scheme`` per type; otherwise the scheme is only checked. ``record`` receives
    ``{layer: {type: {"quant_dtype", "quant_scheme"}}}`` as given (for NNI 3.0's calibration config);
    ``default_dtype`` stands for a missing or ``None`` ``quant_dtype`` (BNN: ``"int1"``).
    """
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence) or not config_list:
        raise QuantizationConfigError(f"{who} config_list must be a non-empty list of dicts, e.g. [{{'op_types': "
                                      "['Linear'], 'target_names': ['weight', '_input_'], 'quant_dtype': 'int8'}].")
    out: list[dict[str, Any]] = []
    types = {n: type(m).__name__ for n, m in model.named_modules() if n}
    for index, entry in enumerate(config_list):
        where = f"config_list[{index}]"
        check_entry(entry, where, QUANT_V3_KEYS, "quantization", QuantizationConfigError)
        targets = entry.get("target_names")
        if isinstance(targets, str) or not isinstance(targets, Sequence) or not targets or \
                any(t not in _TARGETS for t in targets):
            raise QuantizationConfigError(f"{where}['target_names'] must list some of {', '.join(_TARGETS)}, got "
                                          f"{targets!r}.")
        layers = select_modules(model, entry, default_types, where)
        if not layers:
            warnings.warn(f"{who}: {where} selects no layer of the model; it is skipped (as NNI does).",
                          UserWarning, stacklevel=3)
            continue
        settings = {_TARGETS[t]: _settings(entry, t, where, schemes, default_dtype) for t in targets}
        one: dict[str, Any] = {"quant_types": list(settings),
                               "quant_bits": {t: b for t, (b, _, _) in settings.items()},
                               "op_names": layers, "op_types": sorted({types[n] for n in layers})}
        if schemes:
            one["quant_scheme"] = {t: scheme for t, (_, scheme, _) in settings.items()}
        if record is not None:
            for name in layers:
                record.setdefault(name, {}).update({t: given for t, (_, _, given) in settings.items()})
        out.append(one)
    if not out:
        raise QuantizationConfigError(f"{who}: no entry of config_list selects a layer of the model.")
    return out
