"""``config_list`` handling for pruners: the sparsity rules on top of the shared layer selection.

Layer selection (``op_types`` matching classes and their subclasses, ``op_names``, ``"default"``,
``exclude``, later entries winning) is :mod:`slimkit.engines.config_list`. Pruners add:

* ``sparsity`` (alias ``sparsity_per_layer``) must be a number in ``[0, 1)`` unless the entry excludes;
  NNI 2.x's ``total_sparsity`` is each selected layer's sparsity here (NNI 2.x's "normal" allocation; the NNI
  2.x classes of :mod:`slimkit.faces.nni.v2` also rank it globally);
* ``op_partial_names`` (NNI's config-list page): every layer whose name contains one of the strings is selected;
* a selected layer must be an instance of one of the pruner's supported types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.config_list import (
    check_config_list,
    check_entry_keys,
    matches_op_types,
    select_layers,
)
from slimkit.errors import ConfigError, closest

BASE_CONFIG_KEYS: tuple[str, ...] = ("sparsity", "sparsity_per_layer", "total_sparsity", "op_types", "op_names",
                                     "op_partial_names", "exclude")
_EXAMPLE = "{'sparsity': 0.5, 'op_types': ['default']}"


class PruningConfigError(ConfigError):
    """A pruning ``config_list`` entry is malformed or selects layers the pruner cannot handle."""


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


def partial_names(model: nn.Module, parts: Any, index: int) -> list[str]:
    """The layer names containing one of ``parts`` (NNI's ``op_partial_names``); a part matching none is an error."""
    if isinstance(parts, str) or not isinstance(parts, Sequence) or not all(isinstance(p, str) for p in parts):
        raise PruningConfigError(f"config_list[{index}]['op_partial_names'] must be a list of strings (parts of "
                                 f"layer names), got {parts!r}.")
    names = [name for name, _ in model.named_modules() if name]
    found: list[str] = []
    for part in parts:
        hits = [n for n in names if part in n]
        if not hits:
            raise PruningConfigError(f"config_list[{index}] op_partial_names entry {part!r} is part of no layer name."
                                     f"{closest(part, names)} Layer names: {', '.join(names[:15])}"
                                     f"{', ...' if len(names) > 15 else ''}.")
        found += [n for n in hits if n not in found]
    return found


def nni2_keys(model: nn.Module, entry: Any, index: int) -> Any:
    """``entry`` with ``op_partial_names`` merged into ``op_names`` and ``total_sparsity`` as ``sparsity``."""
    if not isinstance(entry, Mapping) or not ({"op_partial_names", "total_sparsity"} & set(entry)):
        return entry
    out = dict(entry)
    if "op_partial_names" in out:
        found = partial_names(model, out.pop("op_partial_names"), index)
        out["op_names"] = list(dict.fromkeys([*out.get("op_names", []), *found]))
    if "total_sparsity" in out:
        clash = [k for k in ("sparsity", "sparsity_per_layer") if k in out]
        if clash:
            raise PruningConfigError(f"config_list[{index}] gives both 'total_sparsity' and {clash[0]!r}: the first "
                                     "is the selected layers' sparsity together, the second each layer's; keep one.")
        out["sparsity"] = out.pop("total_sparsity")
    return out


def validate_config_entry(
    entry: Any, index: int, allowed_keys: Sequence[str] = BASE_CONFIG_KEYS
) -> None:
    """Check one ``config_list`` entry's type, keys, sparsity and ``exclude`` flag (not the selection)."""
    if not check_entry_keys(entry, index, allowed_keys, _EXAMPLE, PruningConfigError):
        _check_sparsity(entry, index)


def resolve_config_list(
    model: nn.Module,
    config_list: Sequence[Mapping[str, Any]],
    default_op_types: Sequence[str],
    supported_op_types: Sequence[str] | None = None,
    extra_keys: Sequence[str] = (),
) -> dict[str, dict[str, Any]]:
    """Resolve ``config_list`` to ``{layer_name: config}`` (later entries win per layer).

    ``default_op_types`` is what ``"default"`` expands to. When ``supported_op_types`` is given, a selected
    layer that is not an instance of one of them is an error (``None`` accepts any type). ``extra_keys`` are
    pruner-specific keys allowed besides :data:`BASE_CONFIG_KEYS`. Each resolved config is a copy of the
    winning entry with ``sparsity`` filled in (from ``sparsity_per_layer`` when that alias was used) and
    ``op_type`` set to the layer's class name. Excluded layers are absent; the result follows the model order.
    """
    check_config_list(model, config_list, _EXAMPLE, PruningConfigError)
    config_list = [nni2_keys(model, entry, index) for index, entry in enumerate(config_list)]
    allowed = tuple(BASE_CONFIG_KEYS) + tuple(extra_keys)
    for index, entry in enumerate(config_list):
        validate_config_entry(entry, index, allowed)
    resolved: dict[str, dict[str, Any]] = {}
    for name, index in select_layers(model, config_list, default_op_types, PruningConfigError).items():
        entry, module = config_list[index], model.get_submodule(name)
        config = {k: v for k, v in entry.items() if k not in ("sparsity_per_layer", "exclude")}
        config["sparsity"] = _check_sparsity(entry, index)
        config["op_type"] = type(module).__name__
        if supported_op_types is not None and not matches_op_types(module, supported_op_types):
            raise PruningConfigError(
                f"Layer {name!r} is a {config['op_type']}, which this pruner cannot prune; it supports "
                f"{', '.join(supported_op_types)} (and their subclasses). Narrow 'op_types'/'op_names' or add "
                f"{{'exclude': True, 'op_names': [{name!r}]}}."
            )
        resolved[name] = config
    return resolved


def layer_weight(module: nn.Module, name: str) -> torch.Tensor:
    """Return ``module.weight`` or raise a config error naming the layer when it has none."""
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor):
        raise PruningConfigError(
            f"Layer {name!r} ({type(module).__name__}) has no weight tensor to prune; "
            f"exclude it with {{'exclude': True, 'op_names': [{name!r}]}}."
        )
    return weight
