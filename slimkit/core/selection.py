"""The one layer-selection vocabulary every algorithm uses for targets and exclusions.

A layer is named three ways, and every ``op_names`` / ``exclude`` / ``target`` list accepts all of them:

* an **exact name** from ``model.named_modules()``: ``"encoder.layer.0.output.dense"``;
* a **glob pattern** (``fnmatch``: ``*``, ``?``, ``[...]``) over the full name, or over its last part:
  ``"*.output.dense"``, ``"*proj"`` (every layer whose last name part ends in ``proj``), ``"layer.1[0-1].*"``;
* an **op type** selects by class, ``op_types: ["Conv2d"]``; it matches subclasses too (``isinstance``), so
  a TF-"SAME" ``Conv2d`` subclass is a ``Conv2d``.

A pattern that matches no layer is an error at the boundary (:func:`unmatched`), so a typo never silently
selects nothing.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

from torch import nn

__all__ = ["is_pattern", "matches", "op_type_matches", "select", "unmatched"]

_GLOB = set("*?[")


def is_pattern(text: str) -> bool:
    """Whether ``text`` is a glob pattern rather than an exact layer name."""
    return any(c in _GLOB for c in text)


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether layer ``name`` is named by any entry of ``patterns`` (exact name, or glob on the full/last part)."""
    last = name.rsplit(".", 1)[-1]
    return any(name == p or (is_pattern(p) and (fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(last, p)))
               for p in patterns)


def op_type_matches(module: nn.Module, op_types: Iterable[str]) -> bool:
    """Whether ``module`` is an instance of a class named in ``op_types`` (its own class or any base class)."""
    wanted = set(op_types)
    return any(cls.__name__ in wanted for cls in type(module).__mro__ if issubclass(cls, nn.Module))


def unmatched(names: Iterable[str], patterns: Sequence[str]) -> list[str]:
    """The entries of ``patterns`` that name no layer in ``names`` (report them: they are usually typos)."""
    listed = list(names)
    return [p for p in patterns if not any(matches(n, [p]) for n in listed)]


def select(model: nn.Module, op_types: Sequence[str] = (), names: Sequence[str] = (),
           exclude: Sequence[str] = ()) -> list[str]:
    """Layer names of ``model`` (model order) chosen by type or name and not excluded.

    With neither ``op_types`` nor ``names`` every named layer is a candidate.
    """
    chosen = []
    for name, module in model.named_modules():
        if not name:
            continue
        by_type = bool(op_types) and op_type_matches(module, op_types)
        by_name = bool(names) and matches(name, names)
        if (by_type or by_name or not (op_types or names)) and not matches(name, exclude):
            chosen.append(name)
    return chosen
