"""The script-free ``search`` block: SmashConfig keys whose values are choices or ranges.

``{"pruner": [null, "l1_filter"], "l1_filter_sparsity": {"range": [0.2, 0.8], "type": "float"},
"quantizer": [null, "int8_dynamic"]}`` searches four algorithm combinations; ``l1_filter_sparsity`` is only
suggested in trials whose pruner is ``l1_filter``. A plain value fixes a key (``"rtn_bits": 4``); ``null`` in a
group's list means "no algorithm of this group".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slimkit.config.smash_config import SmashConfig
from slimkit.core import registry
from slimkit.core.contract import GROUPS
from slimkit.errors import AlgorithmNotFoundError, ConfigError
from slimkit.experiment.space import Param, is_spec, parse_spec, ranked


@dataclass
class SmashSpace:
    """Searched parameters and fixed settings of a ``search`` block."""

    params: list[Param] = field(default_factory=list)
    fixed: dict[str, Any] = field(default_factory=dict)

    def suggest(self, trial: Any) -> dict[str, Any]:
        """Ask ``trial`` for every parameter whose condition holds; return the chosen values."""
        chosen: dict[str, Any] = {}
        for param in self.params:  # groups come first, so conditions are known when a hyperparameter is reached
            if param.condition is not None:
                group, algorithm = param.condition
                if chosen.get(group, self.fixed.get(group)) != algorithm:
                    continue
            chosen[param.name] = param.suggest(trial)
        return chosen

    def config(self, values: Mapping[str, Any]) -> SmashConfig:
        """The SmashConfig of one trial: fixed settings, then the trial's values (only for chosen algorithms)."""
        cfg = SmashConfig()
        settings = {**self.fixed, **values}
        for group in GROUPS:
            if settings.get(group) is not None:
                cfg[group] = settings[group]
        active = set(cfg.get_active_algorithms())
        for key, value in settings.items():
            if key not in GROUPS and registry.get(_owner(key)).algorithm_name in active:
                cfg[key] = value
        return cfg


def _owner(key: str) -> str:
    owners = [n for n in registry.all_names() if key.startswith(n + "_")]
    return max(owners, key=len)


def _check_algorithm(group: str, name: Any, path: str) -> str | None:
    if name is None:
        return None
    valid = registry.by_group(group)
    if not isinstance(name, str):
        raise ConfigError(f"{path}: an algorithm name or null; got {name!r}. Valid {group}s: {', '.join(valid)}.")
    try:
        cls = registry.get(name)
    except AlgorithmNotFoundError:
        raise ConfigError(f"{path}: unknown {group} {name!r}. Valid {group}s (closest first): "
                          f"{', '.join(ranked(name, valid))}, or null for none.") from None
    if cls.group != group:
        raise ConfigError(f"{path}: {name!r} is a {cls.group}, not a {group}; put it under search.{cls.group}.")
    return cls.algorithm_name


def _check_value(key: str, value: Any, path: str) -> None:
    try:
        SmashConfig()[key] = value
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _is_value(key: str, value: Any) -> bool:
    try:
        _check_value(key, value, key)
    except ConfigError:
        return False
    return True


def parse_search(search: Any, automatic: bool, path: str = "search") -> SmashSpace:
    """Validate a ``search`` block (errors name the key path and what is allowed) into a :class:`SmashSpace`."""
    if not isinstance(search, Mapping) or not search:
        raise ConfigError(f"{path}: must be a non-empty object of SmashConfig keys, e.g. "
                          '{"pruner": [null, "l1_filter"], "l1_filter_sparsity": {"range": [0.2, 0.8], '
                          f'"type": "float"}}; got {search!r}.')
    space = SmashSpace()
    group_choices: dict[str, list[str | None]] = {}
    for group in [k for k in GROUPS if k in search]:  # groups first: hyperparameters depend on them
        value, where = search[group], f"{path}.{group}"
        if is_spec(value):
            value = parse_spec(value, where, group).choices
        if isinstance(value, list):
            if not value:
                raise ConfigError(f"{where}: an empty list; give the algorithms to try, null for none.")
            names = [_check_algorithm(group, v, f"{where}[{i}]") for i, v in enumerate(value)]
            group_choices[group] = names
            if len(names) > 1:
                space.params.append(Param(name=group, kind="choice", path=where, choices=names))
            else:
                space.fixed[group] = names[0]
        else:
            space.fixed[group] = _check_algorithm(group, value, where)
            group_choices[group] = [space.fixed[group]]
    for key, value in search.items():
        if key in GROUPS:
            continue
        where = f"{path}.{key}"
        try:
            SmashConfig()[key]
        except ConfigError as exc:
            valid = list(GROUPS) + [h["name"] for n in registry.names() for h in registry.info(n)["hyperparameters"]]
            if not isinstance(key, str) or not any(key.startswith(n + "_") for n in registry.all_names()):
                raise ConfigError(f"{where}: unknown SmashConfig key. Valid keys (closest first): "
                                  f"{', '.join(ranked(str(key), valid)[:8])}, ...") from None
            raise ConfigError(f"{where}: {exc}") from None
        cls = registry.get(_owner(key))
        chosen = group_choices.get(cls.group, [])
        if cls.algorithm_name not in chosen:
            raise ConfigError(f"{where}: sets a hyperparameter of {cls.algorithm_name!r}, which search.{cls.group} "
                              f"never chooses ({chosen or 'not given'}); add {cls.algorithm_name!r} to "
                              f"search.{cls.group} or remove {key!r}.")
        condition = (cls.group, cls.algorithm_name) if cls.group not in space.fixed else None
        if isinstance(value, list) and value and _is_value(key, value) and not _is_value(key, value[0]):
            pass  # a list-valued hyperparameter written as is (op_names, exclude): one fixed value, not choices
        elif isinstance(value, list) and len(value) == 1:
            value = value[0]  # one choice is a fixed value
        if is_spec(value) or (isinstance(value, list) and not _is_value(key, value)):
            param = parse_spec(value if is_spec(value) else {"range": value, "type": "choice"}, where, key)
            param.condition = condition
            for bound in (param.choices if param.kind == "choice" else [param.low, param.high]):
                _check_value(key, bound, f"{where}.range" if is_spec(value) else where)
            space.params.append(param)
        else:
            _check_value(key, value, where)
            space.fixed[key] = value
    if not automatic and space.params:
        raise ConfigError(f"{space.params[0].path}: is a search ({space.params[0].kind}) but a one-time experiment "
                          "needs fixed values; run with --automatic to search it, or write one value.")
    return space
