"""Search spaces of an experiment: ranges inside ``config_list`` and SmashConfig choices, as Optuna parameters.

A searched value is written ``{"range": [lo, hi], "type": "float"|"int"|"choice"}`` (Auptimizer's form), with
``"interval": step`` or ``"n": points`` to make a float range a grid (the ``sequence``/``grid`` proposers need
one) and ``"log": true`` for a log scale. In the script-free ``search`` block a bare list is a choice
(``"pruner": [null, "l1_filter"]``), and an algorithm's hyperparameters are only searched in trials that choose
that algorithm (conditional parameters).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slimkit.errors import ConfigError

TYPES = ("float", "int", "choice")
SPEC_KEYS = ("range", "type", "interval", "n", "log")


def ranked(given: str, names: Sequence[str]) -> list[str]:
    """``names``, closest to ``given`` first."""
    import difflib

    return sorted(names, key=lambda n: (-difflib.SequenceMatcher(None, given.lower(), n.lower()).ratio(), n))


def one_of(value: Any, path: str, allowed: Sequence[str]) -> Any:
    """``value`` when it is one of ``allowed``; a ConfigError listing them, closest first, otherwise."""
    if value not in allowed:
        raise ConfigError(f"{path}: {value!r} is not allowed; use one of (closest first): "
                          f"{', '.join(ranked(str(value), allowed))}.")
    return value


def bounded(value: Any, path: str, low: float, high: float | None = None, *, integer: bool = False,
            open_low: bool = False, must: bool = True) -> Any:
    """``value`` when it is a (whole, with ``integer``) number from ``low`` (excluded with ``open_low``) to ``high``.

    Otherwise a ConfigError: ``"<path>: must be a whole number >= 1; got 0."`` (without "must be" when not ``must``).
    """
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value < low or (open_low and value == low) or (
            high is not None and value > high):
        bounds = f"{'>' if open_low else '>='} {low}" + (f" and <= {high}" if high is not None else "")
        raise ConfigError(f"{path}: {'must be ' if must else ''}a {'whole ' if integer else ''}number {bounds}; "
                          f"got {value!r}.")
    return value


def is_spec(value: Any) -> bool:
    """Whether ``value`` is a search-range spec (a dict with ``range`` or ``type``)."""
    return isinstance(value, Mapping) and ("range" in value or "type" in value)


@dataclass
class Param:
    """One searched value: its Optuna name, kind and bounds or choices, and the choice it depends on."""

    name: str
    kind: str
    path: str
    low: float | int | None = None
    high: float | int | None = None
    choices: list[Any] = field(default_factory=list)
    step: float | None = None
    n: int | None = None
    log: bool = False
    #: ``(param name, value)``: the parameter exists only in trials where that other parameter has that value
    condition: tuple[str, Any] | None = None

    def grid(self) -> list[Any] | None:
        """The values a grid search visits (``None`` when the range is continuous with no interval or n)."""
        if self.kind == "choice":
            return list(self.choices)
        if self.kind == "int":
            return list(range(int(self.low), int(self.high) + 1, self._int_step()))
        if self.step:
            count = int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
            return [round(self.low + i * self.step, 12) for i in range(count)]
        if self.n:
            if self.n == 1:
                return [self.low]
            return [round(self.low + i * (self.high - self.low) / (self.n - 1), 12) for i in range(self.n)]
        return None

    def _int_step(self) -> int:
        """An int range's step: ``interval``, or from ``n`` points (Auptimizer: floor((max - min) / (n - 1)))."""
        if self.step:
            return max(1, int(self.step))
        if self.n and self.n > 1:
            return max(1, (int(self.high) - int(self.low)) // (self.n - 1))
        return 1

    def suggest(self, trial: Any) -> Any:
        """Ask an Optuna trial for this parameter's value."""
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, self.choices)
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), step=self._int_step(), log=self.log)
        if self.step:
            return trial.suggest_float(self.name, self.low, self.high, step=self.step)
        if self.n:
            return trial.suggest_categorical(self.name, self.grid())
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)


def parse_spec(spec: Mapping[str, Any], path: str, name: str) -> Param:
    """Check one ``{"range": ..., "type": ...}`` spec; errors name ``path`` and say what is allowed."""
    for key in spec:
        if key not in SPEC_KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} in a search range. Allowed (closest first): "
                              f"{', '.join(ranked(str(key), SPEC_KEYS))}.")
    kind = spec.get("type", "choice" if isinstance(spec.get("range"), list) and len(spec["range"]) != 2 else None)
    if kind not in TYPES:
        raise ConfigError(f"{path}.type: {kind!r} is not a search type; use one of {', '.join(TYPES)} "
                          f"(closest first: {', '.join(ranked(str(kind), TYPES))}).")
    values = spec.get("range")
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{path}.range: give a list, [lo, hi] for {kind!r} or the values for 'choice'; "
                          f"got {values!r}.")
    param = Param(name=name, kind=kind, path=path, log=bool(spec.get("log", False)))
    if kind == "choice":
        param.choices = copy.deepcopy(values)
        return param
    number = int if kind == "int" else (int, float)
    if len(values) != 2 or not all(isinstance(v, number) and not isinstance(v, bool) for v in values):
        raise ConfigError(f"{path}.range: a {kind!r} range is [lo, hi] with two {'whole ' if kind == 'int' else ''}"
                          f"numbers; got {values!r}.")
    if values[0] > values[1]:
        raise ConfigError(f"{path}.range: lo must not exceed hi; got {values!r} (write [{values[1]}, {values[0]}]).")
    param.low, param.high = values
    if "interval" in spec:
        step = spec["interval"]
        if isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0:
            raise ConfigError(f"{path}.interval: must be a number > 0 (the grid step); got {step!r}.")
        param.step = step
    if "n" in spec:
        n = spec["n"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or "interval" in spec:
            raise ConfigError(f"{path}.n: must be a whole number >= 1 (grid points), and not given with interval; "
                              f"got {n!r}.")
        param.n = n
    if param.log and (param.low <= 0 or param.step or param.n):
        raise ConfigError(f"{path}.log: a log range needs lo > 0 and no interval/n; got range {values!r}.")
    return param


def check_in_unit(param: Param | None, value: Any, path: str, key: str, upper_open: bool = True) -> None:
    """Sparsity-like values must lie in [0, 1) (fixed values and range bounds alike)."""
    values = ([param.low, param.high] if param.kind != "choice" else param.choices) if param else [value]
    for v in values:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v and (v < 1 if upper_open else v <= 1)
        if not ok:
            where = f"{path}.range" if param else path
            raise ConfigError(f"{where}: {key} must lie in [0, 1){'' if upper_open else ']'} (the fraction to remove); "
                              f"got {values if param else value!r}.")


def config_list_params(config_list: Any, expand_default: bool, path: str = "compression.config_list"
                       ) -> list[Param]:
    """The searched values of an Auptimizer ``config_list`` (one per op name with ``expand_op_names``)."""
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence) or not config_list:
        raise ConfigError(f"{path}: must be a non-empty list of dicts such as "
                          f"[{{'sparsity': 0.5, 'op_types': ['Conv2d']}}]; got {config_list!r}.")
    params: list[Param] = []
    for i, entry in enumerate(config_list):
        where = f"{path}[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: must be a dict like {{'sparsity': 0.5, 'op_types': ['Conv2d']}}; "
                              f"got {type(entry).__name__}.")
        expand = entry.get("expand_op_names", expand_default)
        if not isinstance(expand, bool):
            raise ConfigError(f"{where}.expand_op_names: must be true or false; got {expand!r}.")
        for key in ("op_types", "op_names"):
            if key in entry and (not isinstance(entry[key], list) or not all(isinstance(x, str) for x in entry[key])):
                raise ConfigError(f"{where}.{key}: must be a list of names, e.g. ['Conv2d']; got {entry[key]!r}.")
        if "exclude" in entry and not isinstance(entry["exclude"], bool):
            raise ConfigError(f"{where}.exclude: must be true or false; got {entry['exclude']!r}.")
        names = entry.get("op_names") or []
        for key, value in entry.items():
            if key in ("sparsity", "total_sparsity", "sparsity_per_layer"):
                check_in_unit(parse_spec(value, f"{where}.{key}", "") if is_spec(value) else None, value,
                              f"{where}.{key}", key)
            if not is_spec(value):
                continue
            if expand and len(names) > 1:
                params += [parse_spec(value, f"{where}.{key}", f"config_list[{i}].{key}@{op}") for op in names]
            else:
                params.append(parse_spec(value, f"{where}.{key}", f"config_list[{i}].{key}"))
    return params


def fixed_config_list(config_list: Sequence[Mapping[str, Any]], values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``config_list`` with every range replaced by its value in ``values`` (expanded entries split per op)."""
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(config_list):
        searched = {k for k, v in entry.items() if is_spec(v)}
        per_op = {k for k in searched if any(n.startswith(f"config_list[{i}].{k}@") for n in values)}
        base = {k: copy.deepcopy(v) for k, v in entry.items() if k != "expand_op_names"}
        for key in searched - per_op:
            base[key] = values[f"config_list[{i}].{key}"]
        if not per_op:
            out.append(base)
            continue
        for op in entry.get("op_names", []):
            one = {**base, "op_names": [op]}
            for key in per_op:
                one[key] = values[f"config_list[{i}].{key}@{op}"]
            out.append(one)
    return out
