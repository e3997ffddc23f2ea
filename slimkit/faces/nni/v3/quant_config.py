"""NNI 3.0's quantization ``config_list`` keys, translated once into slimkit's (NNI 1.x/2.x) quantization config.

An entry selects modules as a pruning entry does (``op_names``, ``op_names_re``, ``op_types``, the ``exclude_*``
keys) and says what to quantize: ``target_names`` (``"weight"``, ``"_input_"``, ``"_output_"``), ``quant_dtype``
(``"int8"``, ``"uint8"``, ``"int4"``...: the bit width), ``quant_scheme`` (``"affine"`` / ``"symmetric"``) and
``granularity`` (``"default"`` / ``"per_tensor"``; ``"out_channel"`` / ``"per_channel"`` for the weights of a
quantizer with per-channel weight scales: one scale per output channel; ``"per_channel"`` for the inputs and
outputs of a quantizer with per-channel activation scales: one scale per channel, dim 1, as NNI 3.0), directly or
per target in ``target_settings``. ``fuse_names`` (module fusion,
:mod:`slimkit.faces.nni.v3.fusion`) is read by the quantizer before this translation. The result is
``{"quant_types", "quant_bits", "op_names", "op_types"}`` entries, one per selected layer, plus NNI 2.x's
``quant_scheme`` per type for the quantizers whose grids follow a scheme (QAT); as in NNI 3.0, entries that select
the same layer add their targets to it (one entry's ``_input_``, another's ``weight``); a target an earlier entry
set keeps that setting (with a warning). An entry that selects no layer
is skipped with a warning, as NNI does.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.faces.nni.v3.config import SELECT_KEYS, check_entry, select_modules

__all__ = ["QUANT_V3_KEYS", "quant_config_from_v3"]

_SETTINGS = ("quant_dtype", "quant_scheme", "granularity")
#: every key an NNI 3.0 quantization entry may carry here
QUANT_V3_KEYS = (*SELECT_KEYS, "target_names", "target_settings", *_SETTINGS, "fuse_names")
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
              default_dtype: str | None, channel_activations: bool = False) -> tuple[int, str, dict[str, str]]:
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
    channel = _channel_granularity(granularity, target, where, per_channel, channel_activations)
    if merged.get("quant_dtype") is None:
        if default_dtype is None:
            raise QuantizationConfigError(f"{where} gives no quant_dtype for {target!r} (e.g. 'int8').")
        merged["quant_dtype"] = default_dtype  # NNI 3.0's BNN examples give quant_dtype None: one bit
    given = {"quant_dtype": merged["quant_dtype"], "quant_scheme": merged.get("quant_scheme") or "affine"}
    return _bits(merged["quant_dtype"], f"{where} quant_dtype of {target!r}"), \
        f"{'per_channel' if channel else 'per_tensor'}_{given['quant_scheme']}", given


def _channel_granularity(granularity: Any, target: str, where: str, weights: bool, activations: bool) -> bool:
    """Whether ``granularity`` asks for one scale per channel of ``target``; refused where it cannot be had."""
    if granularity in _GRANULARITIES:
        return False
    if target == "weight":
        if granularity in _CHANNEL_GRANULARITIES and weights:
            return True
        also = " ('out_channel' / 'per_channel': one scale per output channel)" if weights else ""
        keeps = "" if weights else " (this quantizer keeps one scale per weight tensor)"
        raise QuantizationConfigError(f"{where} granularity of 'weight' must be 'default' or 'per_tensor'{also}"
                                      f"{keeps}, got {granularity!r}.")
    if granularity == "per_channel" and activations:
        return True
    if granularity == "per_channel":
        raise QuantizationConfigError(f"{where} granularity 'per_channel' of {target!r}: this quantizer keeps one "
                                      "scale per activation tensor; QATQuantizer and the calibration Quantizer "
                                      "(slimkit.compression.base.compressor) keep one per channel. Use 'default' "
                                      "or 'per_tensor' here.")
    raise QuantizationConfigError(f"{where} granularity of {target!r} must be 'default', 'per_tensor' or "
                                  f"'per_channel' (one scale per channel, dim 1; 'out_channel' / 'in_channel' are "
                                  f"for weights, as in NNI 3.0), got {granularity!r}.")


def quant_config_from_v3(model: nn.Module, config_list: Any, default_types: Sequence[str], who: str = "quantizer",
                         schemes: bool = False,
                         record: dict[str, dict[str, dict[str, str]]] | None = None,
                         default_dtype: str | None = None, channels: bool | None = None,
                         channel_activations: bool = False) -> list[dict[str, Any]]:
    """Translate an NNI 3.0 quantization ``config_list`` for ``model`` (see the module docstring).

    ``schemes``: the quantizer's grids follow NNI 2.x's ``quant_scheme`` (QAT): weights may then be per channel
    and each entry carries ``quant_scheme`` per type; otherwise the scheme is only checked. ``record`` receives
    ``{layer: {type: {"quant_dtype", "quant_scheme"}}}`` as given (for NNI 3.0's calibration config);
    ``default_dtype`` stands for a missing or ``None`` ``quant_dtype`` (BNN: ``"int1"``). ``channels``: weights
    may be per channel (default: ``schemes``); ``channel_activations``: inputs and outputs may be per channel.
    """
    channels = schemes if channels is None else channels
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence) or not config_list:
        raise QuantizationConfigError(f"{who} config_list must be a non-empty list of dicts, e.g. [{{'op_types': "
                                      "['Linear'], 'target_names': ['weight', '_input_'], 'quant_dtype': 'int8'}].")
    merged: dict[str, dict[str, Any]] = {}
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
        settings = {_TARGETS[t]: _settings(entry, t, where, channels, default_dtype, channel_activations)
                    for t in targets}
        for name in layers:  # entries add targets to a layer; the first entry to set a target keeps it (NNI 3.0)
            one = merged.setdefault(name, {"quant_types": [], "quant_bits": {}, "op_names": [name],
                                           "op_types": [types[name]], **({"quant_scheme": {}} if schemes else {})})
            again = [t for t in settings if t in one["quant_types"]]
            if again:
                warnings.warn(f"{who}: {where} sets {', '.join(again)} of {name!r}, which an earlier entry set "
                              "already; the earlier setting is kept (as NNI 3.0 does).", UserWarning, stacklevel=3)
            new = {t: value for t, value in settings.items() if t not in again}
            one["quant_types"] += list(new)
            one["quant_bits"].update({t: b for t, (b, _, _) in new.items()})
            if schemes:
                one["quant_scheme"].update({t: scheme for t, (_, scheme, _) in new.items()})
            if record is not None:
                record.setdefault(name, {}).update({t: given for t, (_, _, given) in new.items()})
    if not merged:
        raise QuantizationConfigError(f"{who}: no entry of config_list selects a layer of the model.")
    return list(merged.values())
