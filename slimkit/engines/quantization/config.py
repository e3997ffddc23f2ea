"""``config_list`` handling for quantizers.

An entry selects layers with ``op_types`` / ``op_names`` (or removes them with ``exclude: True``), exactly as
for pruners, and says what to quantize:

* ``quant_types``: a list among ``"weight"``, ``"input"``, ``"output"``;
* ``quant_bits``: an int for every listed type, or a dict ``{type: bits}`` naming each listed type.

Layer selection (type and name checks, subclasses matching ``op_types``, "default" op types, later entries
winning) is the shared :mod:`slimkit.engines.config_list`; this module adds the quantization keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.core.weights import DENSE, find_targets
from slimkit.engines.config_list import check_config_list, check_entry_keys, select_layers
from slimkit.errors import ConfigError, closest

QUANT_CONFIG_KEYS: tuple[str, ...] = ("quant_types", "quant_bits", "op_types", "op_names", "exclude")
_SELECTION_KEYS = ("op_types", "op_names", "exclude")
_EXAMPLE = "{'quant_types': ['weight'], 'quant_bits': 8, 'op_types': ['default']}"


class QuantizationConfigError(ConfigError):
    """A quantization ``config_list`` entry is malformed or selects layers the quantizer cannot handle."""


def _quant_types(entry: Mapping[str, Any], index: int, supported: Sequence[str]) -> list[str]:
    if "quant_types" not in entry:
        raise QuantizationConfigError(
            f"config_list[{index}] has no 'quant_types'; add e.g. 'quant_types': ['weight'] "
            f"(allowed: {', '.join(supported)}) or 'exclude': True."
        )
    value = entry["quant_types"]
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise QuantizationConfigError(
            f"config_list[{index}]['quant_types'] must be a list of strings, got {value!r}; "
            f"write e.g. 'quant_types': [{value!r}]."
        )
    types = [str(t.value) if hasattr(t, "value") else t for t in value]
    if not types:
        raise QuantizationConfigError(
            f"config_list[{index}]['quant_types'] is empty; list at least one of {', '.join(supported)}."
        )
    for t in types:
        if t not in supported:
            raise QuantizationConfigError(
                f"config_list[{index}]['quant_types'] has {t!r}, which this quantizer does not support."
                f"{closest(str(t), supported)} Allowed: {', '.join(supported)}."
            )
    if len(set(types)) != len(types):
        raise QuantizationConfigError(f"config_list[{index}]['quant_types'] lists a type twice: {types}.")
    return types


def _check_bits(value: Any, where: str, bits_range: tuple[int, int]) -> int:
    low, high = bits_range
    if isinstance(value, bool) or not isinstance(value, int):
        raise QuantizationConfigError(f"{where} must be an integer number of bits in [{low}, {high}], got {value!r}.")
    if not low <= value <= high:
        raise QuantizationConfigError(
            f"{where} = {value} is outside [{low}, {high}], the bit widths this quantizer supports."
        )
    return value


def _quant_bits(entry: Mapping[str, Any], index: int, types: list[str], bits_range: tuple[int, int]) -> dict[str, int]:
    if "quant_bits" not in entry:
        raise QuantizationConfigError(
            f"config_list[{index}] has no 'quant_bits'; add e.g. 'quant_bits': 8 or "
            f"'quant_bits': {{{', '.join(f'{t!r}: 8' for t in types)}}}."
        )
    value = entry["quant_bits"]
    where = f"config_list[{index}]['quant_bits']"
    if isinstance(value, Mapping):
        keys = [str(k.value) if hasattr(k, "value") else k for k in value]
        extra = [k for k in keys if k not in types]
        if extra:
            raise QuantizationConfigError(
                f"{where} names {extra}, which 'quant_types' {types} does not list; add them to quant_types "
                "or remove them from quant_bits."
            )
        missing = [t for t in types if t not in keys]
        if missing:
            raise QuantizationConfigError(f"{where} gives no bits for {missing}; add e.g. {missing[0]!r}: 8.")
        return {k: _check_bits(v, f"{where}[{k!r}]", bits_range) for k, v in zip(keys, value.values(), strict=True)}
    bits = _check_bits(value, where, bits_range)
    return {t: bits for t in types}


def _by_default(entry: Mapping[str, Any]) -> bool:
    """Whether ``entry`` selects by ``op_types: ["default"]`` (given, or implied by naming neither key)."""
    op_types = entry.get("op_types")
    return ("default" in op_types) if op_types is not None else "op_names" not in entry


def resolve_quant_config_list(
    model: nn.Module,
    config_list: Sequence[Mapping[str, Any]],
    default_op_types: Sequence[str],
    supported_quant_types: Sequence[str] = ("weight", "input", "output"),
    bits_range: tuple[int, int] = (1, 16),
    extra_keys: Sequence[str] = (),
) -> dict[str, dict[str, Any]]:
    """Resolve ``config_list`` to ``{layer_name: config}`` in model order (later entries win per layer).

    Each config is a copy of the winning entry with ``quant_types`` as a list of strings, ``quant_bits`` as
    ``{type: bits}`` and ``op_type`` set to the layer's class name. Layers to be weight-quantized must have
    a floating-point ``weight`` tensor. ``extra_keys`` are quantizer-specific keys (e.g. ``quant_start_step``).

    A dense layer that :mod:`slimkit.core.weights` marks unsupported (``nn.MultiheadAttention.out_proj``, whose
    weight its parent reads directly; a Linear subclass whose forward is not ``x W^T + b``) is left out when only
    ``"default"`` selected it, and is an error when an entry names it or its type.
    """
    check_config_list(model, config_list, _EXAMPLE, QuantizationConfigError)
    allowed = tuple(QUANT_CONFIG_KEYS) + tuple(extra_keys)
    normalised: list[dict[str, Any] | None] = []
    for index, entry in enumerate(config_list):
        if check_entry_keys(entry, index, allowed, _EXAMPLE, QuantizationConfigError):
            normalised.append(None)
            continue
        types = _quant_types(entry, index, supported_quant_types)
        config = {k: v for k, v in entry.items() if k != "exclude"}
        config["quant_types"] = types
        config["quant_bits"] = _quant_bits(entry, index, types, bits_range)
        normalised.append(config)
    selected = select_layers(model, config_list, default_op_types, QuantizationConfigError)
    unsupported = {t.name: t.unsupported for t in find_targets(model, DENSE) if t.unsupported}

    result: dict[str, dict[str, Any]] = {}
    for name, index in selected.items():
        config = dict(normalised[index] or {})
        config["op_type"] = type(model.get_submodule(name)).__name__
        if "weight" in config["quant_types"] and name in unsupported:
            if _by_default(config_list[index]):
                continue
            raise QuantizationConfigError(
                f"config_list[{index}] selects layer {name!r} ({config['op_type']}), whose weight cannot be "
                f"quantized: {unsupported[name]}. Add {{'exclude': True, 'op_names': [{name!r}]}} after it."
            )
        if "weight" in config["quant_types"]:
            weight = getattr(model.get_submodule(name), "weight", None)
            if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
                raise QuantizationConfigError(
                    f"Layer {name!r} ({config['op_type']}) has no floating-point weight to quantize; drop 'weight' "
                    f"from its quant_types or add {{'exclude': True, 'op_names': [{name!r}]}}."
                )
        result[name] = config
    return result
