"""Family-neutral ``config_list`` layer selection, shared by pruners and quantizers.

A ``config_list`` is a list of dicts. Each entry selects layers with ``op_types`` and/or ``op_names`` (or
removes them with ``exclude: True``); entries are applied in order, so for every layer the *last* entry that
selects it wins. What an entry *does* to its layers (``sparsity``, ``quant_bits``, ...) is checked by the
family (:mod:`slimkit.engines.pruning.config`, :mod:`slimkit.engines.quantization.config`). Rules:

* ``op_types`` lists class names; a layer matches a name when its class *or any base class* has that name,
  so ``["Conv2d"]`` also selects ``class Conv2dSame(nn.Conv2d)``. ``"default"`` expands to the layer types
  the compressor supports. Names must be ``torch.nn`` classes or classes of modules found in the model.
* ``op_names`` lists qualified module names as in ``model.named_modules()``, or glob patterns over them
  (``"layer1.*.conv2"``, ``"*proj"``), the vocabulary of :mod:`slimkit.core.selection`.
* with both keys a layer must match both; with neither the entry means ``op_types: ["default"]``.
* ``exclude`` must be a bool; an excluding entry must select something explicitly.

Every function takes ``error``, the :class:`~slimkit.errors.ConfigError` subclass to raise, so each family
reports in its own error type.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from torch import nn

from slimkit.core.selection import is_pattern, matches, op_type_matches, unmatched
from slimkit.errors import ConfigError, closest

__all__ = [
    "check_config_list",
    "check_entry_keys",
    "class_names",
    "matches_op_types",
    "select_layers",
    "string_list",
]

_MAX_NAMES_SHOWN = 15
#: whether a module is an instance of a class named in ``op_types`` (subclasses match)
matches_op_types = op_type_matches


def class_names(module: nn.Module) -> set[str]:
    """The names of ``module``'s class and of all its base classes (what ``op_types`` can match)."""
    return {cls.__name__ for cls in type(module).__mro__}


def _torch_nn_class_names() -> set[str]:
    classes = (getattr(nn, name) for name in dir(nn))
    return {cls.__name__ for cls in classes if isinstance(cls, type) and issubclass(cls, nn.Module)}


def _names_hint(given: str, names: Sequence[str]) -> str:
    """Real names, the closest to ``given`` first, truncated to a readable length."""
    ranked = difflib.get_close_matches(given, list(names), n=len(names), cutoff=0.0)
    ordered = ranked + [n for n in names if n not in ranked]
    more = len(ordered) - _MAX_NAMES_SHOWN
    return ", ".join(ordered[:_MAX_NAMES_SHOWN]) + (f", ... ({more} more)" if more > 0 else "")


def check_config_list(model: Any, config_list: Any, example: str, error: type[ConfigError]) -> None:
    """Check that ``model`` is a module and ``config_list`` a non-empty list (``example``: one valid entry)."""
    if not isinstance(model, nn.Module):
        raise error(f"model must be a torch.nn.Module, got {type(model).__name__}.")
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence):
        raise error(f"config_list must be a list of dicts, e.g. [{example}], got {type(config_list).__name__}.")
    if len(config_list) == 0:
        raise error(f"config_list is empty; add at least one entry like {example}.")


def check_entry_keys(
    entry: Any, index: int, allowed_keys: Sequence[str], example: str, error: type[ConfigError]
) -> bool:
    """Check that entry ``index`` is a dict of allowed keys with a bool ``exclude``; return that flag."""
    if not isinstance(entry, Mapping):
        raise error(f"config_list[{index}] must be a dict like {example}, got {type(entry).__name__}.")
    for key in entry:
        if key not in allowed_keys:
            raise error(
                f"config_list[{index}] has unknown key {key!r}.{closest(str(key), allowed_keys)} "
                f"Allowed keys: {', '.join(sorted(allowed_keys))}."
            )
    exclude = entry.get("exclude", False)
    if not isinstance(exclude, bool):
        raise error(f"config_list[{index}]['exclude'] must be True or False, got {exclude!r}.")
    if exclude and "op_types" not in entry and "op_names" not in entry:
        raise error(f"config_list[{index}] has 'exclude': True but selects nothing; add 'op_names' or 'op_types'.")
    return exclude


def string_list(entry: Mapping[str, Any], key: str, index: int, error: type[ConfigError]) -> list[str] | None:
    """``entry[key]`` as a list of strings (``None`` when absent); a bare string or other items are an error."""
    if key not in entry:
        return None
    value = entry[key]
    if isinstance(value, str) or not isinstance(value, Iterable) or not all(isinstance(v, str) for v in value):
        raise error(
            f"config_list[{index}]['{key}'] must be a list of strings, got {value!r}; "
            f"write e.g. '{key}': [{value!r}]" + ("" if isinstance(value, str) else " with string items") + "."
        )
    return list(value)


def _expand_op_types(
    op_types: list[str], index: int, known: set[str], model_types: set[str], default_op_types: Sequence[str],
    error: type[ConfigError],
) -> set[str]:
    expanded: set[str] = set()
    for op_type in op_types:
        if op_type == "default":
            expanded.update(default_op_types)
        elif op_type in known:
            expanded.add(op_type)
        else:
            raise error(
                f"config_list[{index}] op_type {op_type!r} is not a torch.nn class name nor a module type "
                f"in this model.{closest(op_type, known)} Types in this model: {', '.join(sorted(model_types))}; "
                "'default' means the layer types this compressor supports."
            )
    return expanded


def select_layers(
    model: nn.Module, config_list: Sequence[Mapping[str, Any]], default_op_types: Sequence[str],
    error: type[ConfigError],
) -> dict[str, int]:
    """``{layer name: index of the last entry selecting it}`` for every layer not excluded, in model order.

    Entries must already have passed :func:`check_entry_keys`. An unknown ``op_types`` name or an unknown
    ``op_names`` name raises ``error`` listing what the model has; an entry that selects no layer is skipped with
    a warning, as NNI does, unless no entry selects any (then it is the error).
    """
    modules = [(name, module) for name, module in model.named_modules() if name]
    layer_names = [name for name, _ in modules]
    model_types = {type(module).__name__ for _, module in modules}
    known = _torch_nn_class_names().union(*(class_names(m) for _, m in modules))
    chosen: dict[str, int | None] = {}
    skipped: list[str] = []
    for index, entry in enumerate(config_list):
        op_types = string_list(entry, "op_types", index, error)
        op_names = string_list(entry, "op_names", index, error)
        if op_types is None and op_names is None:
            op_types = ["default"]
        types = None if op_types is None else _expand_op_types(
            op_types, index, known, model_types, default_op_types, error)
        for name in unmatched(layer_names, op_names or ()):
            what = "pattern matches no layer" if is_pattern(name) else "is not a layer"
            raise error(
                f"config_list[{index}] op_name {name!r} {what} of this model. "
                f"Layer names (closest first): {_names_hint(name, layer_names)}."
            )
        names = None if op_names is None else list(op_names)
        selected = [name for name, module in modules
                    if (types is None or matches_op_types(module, types)) and (names is None or matches(name, names))]
        if not selected:
            wanted = f"op_types {sorted(types)}" if types is not None else ""
            if names is not None:
                found = {n: type(m).__name__ for n, m in modules if matches(n, names)}
                wanted += (" and " if wanted else "") + f"op_names {found} (name: type)"
            skipped.append(f"config_list[{index}] selects no layer: nothing in the model matches {wanted}. "
                           f"Types in this model: {', '.join(sorted(model_types))}.")
        for name in selected:
            chosen[name] = None if entry.get("exclude", False) else index
    order = {name: i for i, name in enumerate(layer_names)}
    result = {name: idx for name, idx in sorted(chosen.items(), key=lambda item: order[item[0]]) if idx is not None}
    if skipped and not result:
        raise error(skipped[0])
    for message in skipped:  # NNI skips an entry that selects nothing (e.g. a ReLU6 entry for a ReLU net)
        warnings.warn(f"{message} The entry is skipped.", UserWarning, stacklevel=3)
    return result
