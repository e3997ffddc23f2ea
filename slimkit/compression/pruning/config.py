"""``config_list`` handling for pruners: validate the entries and resolve them to one config per layer.

A ``config_list`` is a list of dicts. Each entry selects layers (``op_types`` and/or ``op_names``) and either
gives them a ``sparsity`` or removes them with ``exclude: True``. Entries are applied in order, so for every
layer the *last* entry that selects it wins. Rules:

* ``op_types`` lists ``torch.nn`` class names (or class names of modules found in the model); ``"default"``
  expands to the layer types the pruner supports.
* ``op_names`` lists qualified module names as in ``model.named_modules()``.
* with both keys a layer must match both; with neither the entry means ``op_types: ["default"]``.
* ``sparsity`` (alias ``sparsity_per_layer``) must be a number in ``[0, 1)``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError, closest

BASE_CONFIG_KEYS: tuple[str, ...] = ("sparsity", "sparsity_per_layer", "op_types", "op_names", "exclude")
_MAX_NAMES_SHOWN = 15


class PruningConfigError(ConfigError):
    """A pruning ``config_list`` entry is malformed or selects layers the pruner cannot handle."""


def _torch_nn_class_names() -> set[str]:
    return {
        name
        for name in dir(nn)
        if isinstance(getattr(nn, name), type) and issubclass(getattr(nn, name), nn.Module)
    }


def _names_hint(given: str, names: Sequence[str]) -> str:
    """Real names, the closest to ``given`` first, truncated to a readable length."""
    ranked = difflib.get_close_matches(given, list(names), n=len(names), cutoff=0.0)
    rest = [n for n in names if n not in ranked]
    ordered = ranked + rest
    shown = ", ".join(ordered[:_MAX_NAMES_SHOWN])
    more = len(ordered) - _MAX_NAMES_SHOWN
    return shown + (f", ... ({more} more)" if more > 0 else "")


def _string_list(entry: Mapping[str, Any], key: str, index: int) -> list[str] | None:
    if key not in entry:
        return None
    value = entry[key]
    if isinstance(value, str) or not isinstance(value, Iterable) or not all(isinstance(v, str) for v in value):
        raise PruningConfigError(
            f"config_list[{index}]['{key}'] must be a list of strings, got {value!r}; "
            f"write e.g. '{key}': [{value!r}]" + ("" if isinstance(value, str) else " with string items") + "."
        )
    return list(value)


def _check_sparsity(entry: Mapping[str, Any], index: int) -> float:
    present = [k for k in ("sparsity", "sparsity_per_layer") if k in entry]
    if len(present) == 2:
        raise PruningConfigError(
            f"config_list[{index}] gives both 'sparsity' and 'sparsity_per_layer'; they mean the same, keep one."
        )
    if not present:
        raise PruningConfigError(
            f"config_list[{index}] has no 'sparsity'; add 'sparsity': <float in [0, 1)> "
            "or 'exclude': True to leave the selected layers unpruned."
        )
    value = entry[present[0]]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PruningConfigError(
            f"config_list[{index}]['{present[0]}'] must be a number in [0, 1), got {value!r}."
        )
    if not 0.0 <= float(value) < 1.0:
        raise PruningConfigError(
            f"config_list[{index}]['{present[0]}'] = {value} is outside [0, 1); "
            "0 keeps every weight and values close to 1 prune almost everything (1 would remove the layer)."
        )
    return float(value)


def validate_config_entry(
    entry: Any, index: int, allowed_keys: Sequence[str] = BASE_CONFIG_KEYS
) -> None:
    """Check one ``config_list`` entry's type, keys, sparsity and ``exclude`` flag (not the selection)."""
    if not isinstance(entry, Mapping):
        raise PruningConfigError(
            f"config_list[{index}] must be a dict like {{'sparsity': 0.5, 'op_types': ['default']}}, "
            f"got {type(entry).__name__}."
        )
    for key in entry:
        if key not in allowed_keys:
            raise PruningConfigError(
                f"config_list[{index}] has unknown key {key!r}.{closest(str(key), allowed_keys)} "
                f"Allowed keys: {', '.join(sorted(allowed_keys))}."
            )
    exclude = entry.get("exclude", False)
    if not isinstance(exclude, bool):
        raise PruningConfigError(f"config_list[{index}]['exclude'] must be True or False, got {exclude!r}.")
    if exclude:
        if "op_types" not in entry and "op_names" not in entry:
            raise PruningConfigError(
                f"config_list[{index}] has 'exclude': True but selects nothing; add 'op_names' or 'op_types'."
            )
    else:
        _check_sparsity(entry, index)


def _check_op_types(
    op_types: list[str], index: int, model_types: set[str], default_op_types: Sequence[str]
) -> list[str]:
    known = _torch_nn_class_names() | model_types
    expanded: list[str] = []
    for op_type in op_types:
        if op_type == "default":
            expanded.extend(default_op_types)
            continue
        if op_type not in known:
            raise PruningConfigError(
                f"config_list[{index}] op_type {op_type!r} is not a torch.nn class name nor a module type "
                f"in this model.{closest(op_type, known)} Types in this model: {', '.join(sorted(model_types))}; "
                "'default' means the layer types this compressor supports."
            )
        expanded.append(op_type)
    return expanded


def _check_op_names(op_names: list[str], index: int, layer_names: list[str]) -> None:
    existing = set(layer_names)
    for name in op_names:
        if name not in existing:
            raise PruningConfigError(
                f"config_list[{index}] op_name {name!r} is not a layer of this model. "
                f"Layer names (closest first): {_names_hint(name, layer_names)}."
            )


def resolve_config_list(
    model: nn.Module,
    config_list: Sequence[Mapping[str, Any]],
    default_op_types: Sequence[str],
    supported_op_types: Sequence[str] | None = None,
    extra_keys: Sequence[str] = (),
) -> dict[str, dict[str, Any]]:
    """Resolve ``config_list`` to ``{layer_name: config}`` (later entries win per layer).

    ``default_op_types`` is what ``"default"`` expands to. When ``supported_op_types`` is given, a selected
    layer of another type is an error (``None`` accepts any type). ``extra_keys`` are pruner-specific keys
    allowed besides :data:`BASE_CONFIG_KEYS`. Each resolved config is a copy of the winning entry with
    ``sparsity`` filled in (from ``sparsity_per_layer`` when that alias was used) and ``op_type`` set to the
    layer's class name. Excluded layers are absent from the result, which follows the model's module order.
    """
    if not isinstance(model, nn.Module):
        raise PruningConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence):
        raise PruningConfigError(
            "config_list must be a list of dicts, e.g. [{'sparsity': 0.5, 'op_types': ['default']}], "
            f"got {type(config_list).__name__}."
        )
    if len(config_list) == 0:
        raise PruningConfigError(
            "config_list is empty; add at least one entry like {'sparsity': 0.5, 'op_types': ['default']}."
        )
    allowed = tuple(BASE_CONFIG_KEYS) + tuple(extra_keys)
    modules = [(name, module) for name, module in model.named_modules() if name]
    layer_names = [name for name, _ in modules]
    model_types = {type(module).__name__ for _, module in modules}

    chosen: dict[str, dict[str, Any] | None] = {}
    for index, entry in enumerate(config_list):
        validate_config_entry(entry, index, allowed)
        op_types = _string_list(entry, "op_types", index)
        op_names = _string_list(entry, "op_names", index)
        if op_types is None and op_names is None:
            op_types = ["default"]
        types = None if op_types is None else set(_check_op_types(op_types, index, model_types, default_op_types))
        if op_names is not None:
            _check_op_names(op_names, index, layer_names)
        names = None if op_names is None else set(op_names)
        selected = [
            (name, module)
            for name, module in modules
            if (types is None or type(module).__name__ in types) and (names is None or name in names)
        ]
        if not selected:
            wanted = f"op_types {sorted(types)}" if types is not None else ""
            if names is not None:
                found = {n: type(m).__name__ for n, m in modules if n in names}
                wanted += (" and " if wanted else "") + f"op_names {found} (name: type)"
            raise PruningConfigError(
                f"config_list[{index}] selects no layer: nothing in the model matches {wanted}. "
                f"Types in this model: {', '.join(sorted(model_types))}."
            )
        for name, module in selected:
            if entry.get("exclude", False):
                chosen[name] = None
                continue
            config = {k: v for k, v in entry.items() if k not in ("sparsity_per_layer", "exclude")}
            config["sparsity"] = _check_sparsity(entry, index)
            config["op_type"] = type(module).__name__
            chosen[name] = config

    resolved = {name: cfg for name, cfg in chosen.items() if cfg is not None}
    if supported_op_types is not None:
        for name, cfg in resolved.items():
            if cfg["op_type"] not in supported_op_types:
                raise PruningConfigError(
                    f"Layer {name!r} is a {cfg['op_type']}, which this pruner cannot prune; it supports "
                    f"{', '.join(supported_op_types)}. Narrow 'op_types'/'op_names' or add "
                    f"{{'exclude': True, 'op_names': [{name!r}]}}."
                )
    order = {name: i for i, name in enumerate(layer_names)}
    return dict(sorted(resolved.items(), key=lambda item: order[item[0]]))


def layer_weight(module: nn.Module, name: str) -> torch.Tensor:
    """Return ``module.weight`` or raise a config error naming the layer when it has none."""
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor):
        raise PruningConfigError(
            f"Layer {name!r} ({type(module).__name__}) has no weight tensor to prune; "
            f"exclude it with {{'exclude': True, 'op_names': [{name!r}]}}."
        )
    return weight
