"""Hyperparameter helpers on top of ConfigSpace: validation messages and the few types ConfigSpace lacks."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from ConfigSpace import (
    CategoricalHyperparameter,
    Constant,
    OrdinalHyperparameter,
    UniformFloatHyperparameter,
    UniformIntegerHyperparameter,
)
from ConfigSpace.hyperparameters import Hyperparameter

__all__ = [
    "Boolean",
    "Hyperparameter",
    "ListHyperparameter",
    "describe_allowed",
    "is_legal",
    "to_jsonable",
]


class ListHyperparameter(Constant):
    """A free list of strings (e.g. module-name patterns to exclude); not searchable, only validated."""

    def __init__(self, name: str, default_value: Sequence[str] = (), meta: Mapping[Hashable, Any] | None = None):
        super().__init__(name, tuple(default_value), meta=meta)

    def legal_value(self, value: Any) -> bool:  # type: ignore[override]
        """Accept any list or tuple of strings."""
        return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def Boolean(name: str, default_value: bool, meta: Mapping[Hashable, Any] | None = None) -> CategoricalHyperparameter:  # noqa: N802
    """A True/False hyperparameter."""
    return CategoricalHyperparameter(name, choices=[True, False], default_value=default_value, meta=meta)


def is_legal(hp: Hyperparameter, value: Any) -> bool:
    """Whether ``value`` is allowed for ``hp`` (strict about bool vs int and int vs float)."""
    if isinstance(hp, ListHyperparameter):
        return hp.legal_value(value)
    if isinstance(hp, UniformIntegerHyperparameter) and (isinstance(value, bool) or not isinstance(value, int)):
        return False
    if isinstance(hp, UniformFloatHyperparameter) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return False
    if isinstance(hp, (CategoricalHyperparameter, OrdinalHyperparameter)):
        seq = hp.choices if isinstance(hp, CategoricalHyperparameter) else hp.sequence
        return any(value == c and type(value) is type(c) for c in seq)
    try:
        return bool(hp.legal_value(value))
    except Exception:  # ConfigSpace raises on values of the wrong kind
        return False


def describe_allowed(hp: Hyperparameter) -> str:
    """Human-readable description of what ``hp`` accepts."""
    if isinstance(hp, ListHyperparameter):
        return "a list of strings"
    if isinstance(hp, UniformFloatHyperparameter):
        return f"a float in [{hp.lower}, {hp.upper}]"
    if isinstance(hp, UniformIntegerHyperparameter):
        return f"an integer in [{hp.lower}, {hp.upper}]"
    if isinstance(hp, CategoricalHyperparameter):
        return "one of " + ", ".join(repr(c) for c in hp.choices)
    if isinstance(hp, OrdinalHyperparameter):
        return "one of " + ", ".join(repr(c) for c in hp.sequence)
    if isinstance(hp, Constant):
        return f"exactly {hp.value!r}"
    return f"a legal value for {type(hp).__name__}"


def to_jsonable(value: Any) -> Any:
    """Convert numpy scalars and tuples so ``json.dumps`` accepts a hyperparameter value."""
    if isinstance(value, tuple):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        return value.item()
    return value
