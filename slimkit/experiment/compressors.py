"""The compressors an experiment may name (``"compressor": "l1_filter"``), each with its kind.

A compressor's ``kind`` is ``"pruning"`` or ``"quantization"``; it decides what the experiment's
``"type"`` may say and whether ``apply_speedup`` makes sense. Pruners come from
:data:`slimkit.compression.pruning.PRUNER_CLASSES` (the same names a SmashConfig uses); quantizers are added
with :func:`register_compressor` when their engines land.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slimkit.compression.pruning import PRUNER_CLASSES, AGPPruner, LevelPruner
from slimkit.errors import ConfigError

KINDS: tuple[str, ...] = ("pruning", "quantization")


@dataclass(frozen=True)
class CompressorSpec:
    """How to build one named compressor.

    ``factory(model, config_list, optimizer=..., dummy_input=..., **kwargs)`` returns the engine (a
    ``Pruner`` for pruning). ``speedup_refusal(kwargs)`` returns ``None`` when ``apply_speedup`` can shrink
    what the engine masks, else the reason it cannot.
    """

    name: str
    kind: str
    factory: Callable[..., Any]
    speedup_refusal: Callable[[Mapping[str, Any]], str | None]
    aliases: tuple[str, ...] = ()


_REGISTRY: dict[str, CompressorSpec] = {}
_ALIASES: dict[str, str] = {}

_UNSTRUCTURED = (
    "zeroes single weights, so no whole channel becomes empty and the speedup has nothing to remove; use a "
    "filter pruner such as 'l1_filter' (or 'agp' with pruning_algorithm='l1') to get a smaller model"
)


def _pruner_refusal(cls: type) -> Callable[[Mapping[str, Any]], str | None]:
    def refusal(kwargs: Mapping[str, Any]) -> str | None:
        if issubclass(cls, LevelPruner):
            return f"level pruning {_UNSTRUCTURED}"
        if issubclass(cls, AGPPruner) and kwargs.get("pruning_algorithm", "level") == "level":
            return f"agp with pruning_algorithm='level' {_UNSTRUCTURED}"
        return None

    return refusal


def register_compressor(spec: CompressorSpec) -> None:
    """Add a compressor an experiment can name; a duplicate name or alias, or an unknown kind, is an error."""
    if spec.kind not in KINDS:
        raise ConfigError(f"Compressor {spec.name!r} has kind {spec.kind!r}; allowed kinds: {', '.join(KINDS)}.")
    for name in (spec.name, *spec.aliases):
        if name in _REGISTRY or name in _ALIASES:
            raise ConfigError(f"A compressor named {name!r} is already registered; pick another name.")
    _REGISTRY[spec.name] = spec
    for alias in spec.aliases:
        _ALIASES[alias] = spec.name


def available_compressors(kind: str | None = None) -> dict[str, str]:
    """``{name: kind}`` of every compressor (only those of ``kind`` when given), sorted by name."""
    return {n: s.kind for n, s in sorted(_REGISTRY.items()) if kind is None or s.kind == kind}


def _ranked(given: str, names: list[str]) -> list[str]:
    """``names`` with the ones closest to ``given`` first."""
    def score(name: str) -> float:
        return difflib.SequenceMatcher(None, given.lower(), name.lower()).ratio()

    return sorted(names, key=lambda n: (-score(n), n))


def get_compressor_spec(name: Any, kind: str | None = None) -> CompressorSpec:
    """Look ``name`` up (short name like ``"l1_filter"`` or class name like ``"L1FilterPruner"``).

    ``kind`` (the experiment's ``"type"``) must match the compressor's kind when given.
    """
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"Compression type {kind!r} is not supported; use one of {', '.join(KINDS)}.")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"compressor must be a name such as 'l1_filter', got {name!r}. "
                          f"Valid names: {', '.join(available_compressors(kind))}.")
    spec = _REGISTRY.get(_ALIASES.get(name, name))
    if spec is None:
        valid = list(available_compressors(kind))
        listing = ", ".join(_ranked(name, valid)) if valid else f"(none registered for type {kind!r} yet)"
        raise ConfigError(f"Unknown compressor {name!r}{f' for type {kind!r}' if kind else ''}. "
                          f"Valid names (closest first): {listing}.")
    if kind is not None and spec.kind != kind:
        raise ConfigError(f"Compressor {spec.name!r} is a {spec.kind} compressor but the experiment says type "
                          f"{kind!r}; set 'type': {spec.kind!r} or pick a {kind} compressor: "
                          f"{', '.join(available_compressors(kind)) or '(none registered yet)'}.")
    return spec


def check_compressor_kwargs(spec: CompressorSpec, kwargs: Mapping[str, Any]) -> None:
    """Refuse keyword arguments the compressor's factory does not take (listing the ones it does)."""
    try:
        params = inspect.signature(spec.factory).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    fixed = {"self", "model", "config_list", "optimizer", "dummy_input"}
    accepted = [n for n, p in params.items() if n not in fixed and p.kind is not inspect.Parameter.VAR_POSITIONAL]
    for key in kwargs:
        if key not in accepted:
            raise ConfigError(f"Compressor {spec.name!r} takes no argument {key!r}. It accepts: "
                              f"{', '.join(accepted) or '(no extra arguments)'}.")


for _name, _cls in PRUNER_CLASSES.items():
    register_compressor(CompressorSpec(_name, "pruning", _cls, _pruner_refusal(_cls), aliases=(_cls.__name__,)))
