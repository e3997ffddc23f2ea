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
    "ConfigListHyperparameter",
    "NameRatiosHyperparameter",
    "Hyperparameter",
    "ListHyperparameter",
    "TextHyperparameter",
    "choice",
    "declared_values",
    "describe_allowed",
    "integer",
    "is_legal",
    "real",
    "to_jsonable",
]


def integer(name: str, lower: int, upper: int, default: int, desc: str) -> UniformIntegerHyperparameter:
    """An integer hyperparameter in ``[lower, upper]`` with its description."""
    return UniformIntegerHyperparameter(name, lower, upper, default_value=default, meta={"desc": desc})


def real(name: str, lower: float, upper: float, default: float, desc: str,
         log: bool = False) -> UniformFloatHyperparameter:
    """A float hyperparameter in ``[lower, upper]`` (log-scaled with ``log``) with its description."""
    return UniformFloatHyperparameter(name, lower, upper, default_value=default, log=log, meta={"desc": desc})


def choice(name: str, choices: list[Any], default: Any, desc: str) -> CategoricalHyperparameter:
    """One of ``choices`` with its description."""
    return CategoricalHyperparameter(name, choices, default_value=default, meta={"desc": desc})


def declared_values(hyperparameters: Sequence[Hyperparameter], config: Mapping[str, Any],
                    names: Sequence[str]) -> dict[str, Any]:
    """``{name: config[name]}`` for ``names``, as int or float where ``hyperparameters`` declares them so."""
    declared = {hp.name: hp for hp in hyperparameters}
    kinds = {UniformIntegerHyperparameter: int, UniformFloatHyperparameter: float}
    return {n: kinds.get(type(declared[n]), lambda v: v)(config[n]) for n in names}


class ListHyperparameter(Constant):
    """A free list of strings (e.g. module-name patterns to exclude); not searchable, only validated."""

    def __init__(self, name: str, default_value: Sequence[str] = (), meta: Mapping[Hashable, Any] | None = None):
        super().__init__(name, tuple(default_value), meta=meta)

    def legal_value(self, value: Any) -> bool:  # type: ignore[override]
        """Accept any list or tuple of strings."""
        return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


class TextHyperparameter(Constant):
    """A free string (e.g. a folder path; ``""`` for unset); not searchable, only validated."""

    def __init__(self, name: str, default_value: str = "", meta: Mapping[Hashable, Any] | None = None):
        super().__init__(name, default_value, meta=meta)

    def legal_value(self, value: Any) -> bool:  # type: ignore[override]
        """Accept any string."""
        return isinstance(value, str)


class NameRatiosHyperparameter(Constant):
    """A list of names from ``choices`` or a dict ``{name: ratio in [0, 1) or None}``; only validated."""

    def __init__(self, name: str, choices: Sequence[str], default_value: Sequence[str],
                 meta: Mapping[Hashable, Any] | None = None):
        self.choices_allowed = tuple(choices)
        super().__init__(name, tuple(default_value), meta=meta)

    def legal_value(self, value: Any) -> bool:  # type: ignore[override]
        """Accept distinct known names, or a non-empty dict of known names to a ratio or None."""
        if isinstance(value, Mapping):
            return bool(value) and all(k in self.choices_allowed for k in value) and all(
                v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1)
                for v in value.values())
        return (isinstance(value, (list, tuple)) and bool(value) and len(set(value)) == len(value)
                and all(isinstance(v, str) and v in self.choices_allowed for v in value))

    def describe(self) -> str:
        """What the hyperparameter accepts, for error messages and the docs."""
        names = ", ".join(repr(c) for c in self.choices_allowed)
        return (f"a list of names from {names}, or a dict of those names to a ratio in [0, 1) (None: the "
                f"sparsity), e.g. {{{self.choices_allowed[0]!r}: 0.5}}")


def Boolean(name: str, default_value: bool, meta: Mapping[Hashable, Any] | None = None) -> CategoricalHyperparameter:  # noqa: N802
    """A True/False hyperparameter."""
    return CategoricalHyperparameter(name, choices=[True, False], default_value=default_value, meta=meta)


def is_legal(hp: Hyperparameter, value: Any) -> bool:
    """Whether ``value`` is allowed for ``hp`` (strict about bool vs int and int vs float)."""
    if isinstance(hp, (ListHyperparameter, ConfigListHyperparameter, TextHyperparameter, NameRatiosHyperparameter)):
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
    """Human-readable description of what ``hp`` accepts (a type with its own ``describe()`` says it itself)."""
    if callable(getattr(hp, "describe", None)):
        return hp.describe()
    if isinstance(hp, ListHyperparameter):
        return "a list of strings"
    if isinstance(hp, TextHyperparameter):
        return "a string"
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
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        return value.item()
    return value


#: Keys a pruning ``config_list`` entry may hold (NNI / Auptimizer form).
CONFIG_LIST_KEYS: tuple[str, ...] = ("sparsity", "sparsity_per_layer", "op_types", "op_names", "exclude")


class ConfigListHyperparameter(Constant):
    """An NNI-style ``config_list``: a list of dicts such as ``{"sparsity": 0.5, "op_types": ["default"]}``.

    Only the structure is checked here (dicts, known keys, value kinds, JSON-able); whether the names and
    types exist in a model is checked when the algorithm runs. The default is the empty list (not used).
    """

    def __init__(self, name: str, meta: Mapping[Hashable, Any] | None = None):
        super().__init__(name, (), meta=meta)

    def legal_value(self, value: Any) -> bool:  # type: ignore[override]
        """Accept a list or tuple of dicts whose keys and values have the config_list kinds."""
        return isinstance(value, (list, tuple)) and all(_legal_config_entry(e) for e in value)

    def describe(self) -> str:
        """What the hyperparameter accepts, for error messages and the docs."""
        return ("a list of dicts with keys " + ", ".join(CONFIG_LIST_KEYS) + ", e.g. [{'sparsity': 0.5, "
                "'op_types': ['default']}, {'exclude': True, 'op_names': ['fc']}]")


def _legal_config_entry(entry: Any) -> bool:
    if not isinstance(entry, Mapping) or not all(isinstance(k, str) and k in CONFIG_LIST_KEYS for k in entry):
        return False
    for key, value in entry.items():
        if key in ("op_types", "op_names"):
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                return False
        elif key == "exclude":
            if not isinstance(value, bool):
                return False
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
    return True
