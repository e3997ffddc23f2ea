"""THE registry: every algorithm once, with its aliases, its NNI-face engine and its experiment kind.

Every face is a view of this table: a SmashConfig key (``cfg["pruner"] = "l1_filter"``), an experiment's
``"compressor": "L1FilterPruner"``, the NNI class names, the razor builder's ``dict(type=...)``. One name
means one algorithm everywhere; unknown names get the closest valid ones. Registration is explicit and loud
(a duplicate name or alias is an error), stage order is derived from the group, compatibility is symmetric.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from slimkit.core.contract import GROUPS, KIND_OF_GROUP, SaveFn, SlimkitAlgorithm
from slimkit.core.hyperparameters import describe_allowed, to_jsonable
from slimkit.core.scopes import MM_SCOPES, external_reason, split_scope
from slimkit.errors import AlgorithmNotFoundError, ConfigError, RegistryError, closest

_REGISTRY: dict[str, type[SlimkitAlgorithm]] = {}
_ALIASES: dict[str, str] = {}
#: other tools' names slimkit does not implement -> the registered algorithm closest to them (see near_names)
_NEAR: dict[str, str] = {}
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_ALIAS_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def engine_name(engine: type) -> str:
    """The name users call an engine by: its ``display_name()`` when it has one, else its class name.

    The compression engines define ``display_name()``: an engine whose NNI 1.x name went to NNI 2.x's class
    (``LevelEngine``) is called by that NNI 1.x name (``LevelPruner``), never by its class name.
    """
    display = getattr(engine, "display_name", None)
    return str(display()) if callable(display) else engine.__name__


def _aliases(cls: type[SlimkitAlgorithm]) -> list[str]:
    """The declared aliases plus the engine's NNI name (:func:`engine_name`), without repeats or the name itself."""
    found = list(cls.aliases)
    if cls.engine is not None:
        found.append(engine_name(cls.engine))
    return [a for i, a in enumerate(found) if a != cls.algorithm_name and a not in found[:i]]


def register(cls: type[SlimkitAlgorithm]) -> type[SlimkitAlgorithm]:
    """Class decorator that registers an algorithm; a duplicate name or a malformed class raises RegistryError."""
    name = getattr(cls, "algorithm_name", None)
    where = f"{cls.__module__}.{cls.__qualname__}"
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise RegistryError(f"{where}: algorithm_name must be snake_case, got {name!r}.")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        other = _REGISTRY[name]
        raise RegistryError(f"Algorithm name {name!r} is registered twice: {other.__module__} and {cls.__module__}.")
    if getattr(cls, "group", None) not in GROUPS:
        raise RegistryError(f"{where}: group must be one of {', '.join(GROUPS)}, got {getattr(cls, 'group', None)!r}.")
    if not isinstance(cls.save_fn, SaveFn):
        raise RegistryError(f"{where}: save_fn must be a SaveFn, got {cls.save_fn!r}.")
    if not cls.description():
        raise RegistryError(f"{where}: add a docstring; its first paragraph documents the algorithm.")
    for group in cls.compatible_algorithms:
        if group not in GROUPS:
            raise RegistryError(f"{where}: compatible_algorithms has unknown group {group!r}; use one of {GROUPS}.")
    for hp in cls().get_hyperparameters():
        if not (hp.meta or {}).get("desc"):
            raise RegistryError(f"{where}: hyperparameter {hp.name!r} needs meta={{'desc': ...}}.")
    aliases = _aliases(cls)
    for alias in aliases:
        taken = _REGISTRY.get(alias) or _REGISTRY.get(_ALIASES.get(alias, ""))
        if not isinstance(alias, str) or not _ALIAS_RE.match(alias):
            raise RegistryError(f"{where}: alias {alias!r} must be an identifier such as 'L1FilterPruner' or 'apoz'.")
        if taken is not None and taken is not cls:
            raise RegistryError(f"{where}: alias {alias!r} already names {taken.algorithm_name!r}.")
    if name in _ALIASES and _ALIASES[name] != name:
        raise RegistryError(f"{where}: algorithm_name {name!r} is already an alias of {_ALIASES[name]!r}.")
    for taken in (name, *aliases):
        if taken in _COMPONENTS:
            raise RegistryError(f"{where}: {taken!r} already names the {_COMPONENTS[taken][1]} component "
                                f"{_qualname(_COMPONENTS[taken][0])}; one name means one thing on every face.")
    for near in cls.near_names:
        if near in _REGISTRY or near in _ALIASES or _NEAR.get(near, name) != name or near in aliases:
            raise RegistryError(f"{where}: near name {near!r} is already a name, an alias or another algorithm's "
                                "near name.")
    _REGISTRY[name] = cls
    for alias in aliases:
        _ALIASES[alias] = name
    for near in cls.near_names:
        _NEAR[near] = name
    return cls


def names() -> list[str]:
    """All registered algorithm names (canonical, no aliases), sorted."""
    return sorted(_REGISTRY)


def aliases() -> dict[str, str]:
    """Every alias -> the canonical name it resolves to, sorted by alias."""
    return dict(sorted(_ALIASES.items()))


def all_names() -> list[str]:
    """Every name any face accepts: canonical names and aliases, sorted."""
    return sorted([*_REGISTRY, *_ALIASES])


def resolve(name: str) -> str:
    """The canonical name for ``name`` (itself or an alias); unknown names list the closest valid ones."""
    if isinstance(name, str) and (name in _REGISTRY or name in _ALIASES):
        return _ALIASES.get(name, name)  # an algorithm's own name is never another's alias (register checks)
    if isinstance(name, str) and name in _NEAR:
        near = _REGISTRY[_NEAR[name]]
        raise AlgorithmNotFoundError(
            f"slimkit has no {name!r} (another tool's algorithm); the closest here is {near.algorithm_name!r}: "
            f"{near.description()} Use {near.algorithm_name!r}, or see `slimkit algorithms` for all of them."
        )
    raise AlgorithmNotFoundError(
        f"Unknown algorithm {name!r}.{closest(str(name), all_names())} Valid algorithms: {', '.join(names())} "
        "(NNI class names such as 'L1FilterPruner' and short names such as 'apoz' are accepted too; "
        "`slimkit algorithms` lists them)."
    )


def get(name: str) -> type[SlimkitAlgorithm]:
    """The algorithm class registered as ``name`` or under an alias of it; unknown names list the closest ones."""
    return _REGISTRY[resolve(name)]


def by_kind(kind: str) -> list[str]:
    """Canonical names of one experiment kind (``"pruning"``, ``"quantization"``...), sorted."""
    return sorted(n for n, c in _REGISTRY.items() if c.kind() == kind)


def kinds() -> tuple[str, ...]:
    """The experiment kinds, in stage order."""
    return tuple(KIND_OF_GROUP[g] for g in GROUPS)


def by_group(group: str) -> list[str]:
    """Registered names of one group, sorted."""
    return sorted(n for n, c in _REGISTRY.items() if c.group == group)


def _allowed(cls: type[SlimkitAlgorithm], other_group: str) -> list[str] | str:
    return cls.compatible_algorithms.get(other_group, "*")


def compatible(a: str, b: str) -> tuple[bool, str]:
    """Whether algorithms ``a`` and ``b`` may be applied together, and why not when they may not.

    The relation is symmetric by construction: both sides must allow each other.
    """
    a, b = resolve(a), resolve(b)
    ca, cb = get(a), get(b)
    if ca.group == cb.group:
        return False, f"both are {ca.group}s and a SmashConfig holds one algorithm per group"
    for x, cx, y, cy in ((a, ca, b, cb), (b, cb, a, ca)):
        allowed = _allowed(cx, cy.group)
        if allowed != "*" and y not in allowed:
            listed = ", ".join(allowed) if allowed else "none"
            return False, f"{x} only combines with these {cy.group}s: {listed}"
    return True, ""


def check_consistency() -> None:
    """Reject unknown names and contradictions in compatible_algorithms (run once all modules are imported).

    A ``save_fn=ARTIFACTS`` algorithm must also implement ``save_artifacts``/``load_artifacts`` and allow no
    algorithm of a later group: its saved files are the final model, so nothing may be applied after it.
    """
    for name, cls in _REGISTRY.items():
        if cls.save_fn == SaveFn.ARTIFACTS:
            _check_artifacts(name, cls)
        for group, allowed in cls.compatible_algorithms.items():
            if allowed == "*":
                continue
            if isinstance(allowed, str):
                raise RegistryError(f"{name}: compatible_algorithms[{group!r}] must be a list or '*', got {allowed!r}.")
            for other in allowed:
                if other not in _REGISTRY:
                    raise RegistryError(f"{name}: compatible_algorithms lists unknown algorithm {other!r}.")
                if _REGISTRY[other].group != group:
                    raise RegistryError(
                        f"{name}: compatible_algorithms[{group!r}] lists {other!r}, "
                        f"which is a {_REGISTRY[other].group}."
                    )
                back = _allowed(_REGISTRY[other], cls.group)
                if back != "*" and name not in back:
                    raise RegistryError(
                        f"Contradiction: {name} lists {other} as compatible but {other} does not list {name} "
                        f"(its {cls.group}s: {', '.join(back) or 'none'})."
                    )


def _check_artifacts(name: str, cls: type[SlimkitAlgorithm]) -> None:
    for method in ("save_artifacts", "load_artifacts"):
        if getattr(cls, method) is getattr(SlimkitAlgorithm, method):
            raise RegistryError(f"{name}: save_fn=ARTIFACTS needs {method}(); implement it or pick another SaveFn.")
    later = [g for g in GROUPS[GROUPS.index(cls.group) + 1 :] if _allowed(cls, g) != []]
    if later:
        raise RegistryError(
            f"{name}: save_fn=ARTIFACTS saves the final model as files, so no algorithm may run after it; set "
            f"compatible_algorithms[g] = [] for the later groups {', '.join(later)}."
        )


def order(algorithm_names: list[str]) -> list[str]:
    """Sort algorithm names by stage (pruner -> ... -> batcher)."""
    return sorted(algorithm_names, key=lambda n: GROUPS.index(get(n).group))


def info(name: str) -> dict[str, Any]:
    """A JSON-able summary of one algorithm (used by the CLI and the generated docs)."""
    cls = get(name)
    name = cls.algorithm_name
    hps = [{"name": f"{name}_{hp.name}", "default": to_jsonable(hp.default_value), "allowed": describe_allowed(hp),
            "desc": (hp.meta or {}).get("desc", "")} for hp in cls().get_hyperparameters()]
    return {
        "name": name,
        "group": cls.group,
        "kind": cls.kind(),
        "aliases": _aliases(cls),
        "engine": None if cls.engine is None else f"{cls.engine.__module__}.{cls.engine.__name__}",
        "description": cls.description(),
        "devices": [d for d, ok in (("cpu", cls.run_on_cpu), ("cuda", cls.run_on_cuda)) if ok],
        "requires": [c for c, ok in (("tokenizer", cls.tokenizer_required), ("processor", cls.processor_required),
                                     ("dataset", cls.dataset_required)) if ok],
        "save_fn": cls.save_fn.value,
        "references": dict(cls.references),
        "hyperparameters": hps,
    }


# ----------------------------------------------------------------- components (the razor builder's table)
#: component name -> (class or factory, kind): distillation losses, recorders, connectors, architectures and
#: razor algorithms that ``build(dict(type=name, ...))`` constructs. Names never collide with algorithm names.
_COMPONENTS: dict[str, tuple[Callable[..., Any], str]] = {}


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def register_component(obj: Callable[..., Any], kind: str, name: str | None = None) -> Callable[..., Any]:
    """Register a buildable class or factory as component ``name`` (default: its ``__name__``) of ``kind``.

    Raises RegistryError when the name is taken by another component or by an algorithm (or its alias).
    """
    name = name or getattr(obj, "__name__", None)
    if not isinstance(name, str) or not _ALIAS_RE.match(name):
        raise RegistryError(f"{_qualname(obj)}: a component name must be an identifier, got {name!r}.")
    if not callable(obj):
        raise RegistryError(f"Component {name!r} must be a class or a function, got {type(obj).__name__}.")
    if name in _REGISTRY or name in _ALIASES:
        raise RegistryError(f"Component name {name!r} ({_qualname(obj)}) is already the algorithm "
                            f"{_ALIASES.get(name, name)!r}; one name means one thing on every face. Pick another.")
    known = _COMPONENTS.get(name)
    if known is not None and _qualname(known[0]) != _qualname(obj):
        raise RegistryError(f"Component name {name!r} is registered twice: {_qualname(known[0])} and {_qualname(obj)}.")
    _COMPONENTS[name] = (obj, kind)
    return obj


def component_names(kind: str | None = None) -> list[str]:
    """Registered component names (of one ``kind`` when given), sorted."""
    return sorted(n for n, (_, k) in _COMPONENTS.items() if kind is None or k == kind)


def get_component(name: str) -> Callable[..., Any]:
    """The class or factory registered as component ``name``; unknown names list the closest ones."""
    if isinstance(name, str) and name in _COMPONENTS:
        return _COMPONENTS[name][0]
    raise AlgorithmNotFoundError(
        f"Unknown component type {name!r}.{closest(str(name), _COMPONENTS)} Registered types: "
        f"{', '.join(component_names()) or 'none'} (register your own with @register_module())."
    )


def _fields(obj: Callable[..., Any]) -> tuple[list[str], list[str], bool]:
    """(every keyword field, the required ones, whether it takes **kwargs) of a class or function."""
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return [], [], True
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return [p.name for p in named], [p.name for p in named if p.default is p.empty], any(
        p.kind == p.VAR_KEYWORD for p in params)


def build_component(cfg: Any) -> Any:
    """Build ``dict(type="Name", **fields)``: the outer type only, as MMEngine does.

    Nested configs (``norm_cfg=dict(type='BN')``, ``distiller=dict(...)``) reach the component as dicts; each
    component builds the ones it takes. ``_scope_`` keys and MMEngine scope prefixes (``'mmrazor.SPOS'``) are
    read: slimkit has one registry, so ``mmrazor`` types resolve there, and a type of another MMEngine-based package
    that slimkit does not have says so. Anything that is not such a dict is returned unchanged (already-built
    objects pass through). A field the component does not take, or a missing required one, raises ConfigError
    naming the component, the field and the fields it takes.
    """
    if not isinstance(cfg, Mapping) or "type" not in cfg:
        return cfg
    kwargs = {k: v for k, v in cfg.items() if k not in ("type", "_scope_")}
    name, scope = split_scope(cfg["type"], cfg.get("_scope_"))
    if callable(name):
        obj = name
    elif scope not in (None, "mmrazor") and name not in _COMPONENTS:
        raise AlgorithmNotFoundError(
            f"{name!r} is a type of {MM_SCOPES.get(scope, scope)} ({scope}), which slimkit does not build: "
            "slimkit reads MMRazor's algorithms, losses and search spaces, and you bring the models, datasets and "
            "runtime yourself (e.g. slimkit.razor.build(cfg.model, architecture=your_model)).")
    else:
        obj = get_component(name)
    label = getattr(obj, "__name__", str(name))
    fields, required, var_kw = _fields(obj)
    unknown = [k for k in kwargs if k not in fields and not var_kw]
    missing = [k for k in required if k not in kwargs]
    if unknown or missing:
        what = (f"has no field {unknown[0]!r}.{closest(unknown[0], fields)}" if unknown
                else f"needs the field {missing[0]!r}.")
        raise ConfigError(f"{label} ({_qualname(obj)}) {what} It takes: {', '.join(fields) or 'no fields'}"
                          f"{' (required: ' + ', '.join(required) + ')' if required else ''}.")
    return obj(**kwargs)


def build_module(spec: Any, what: str) -> Any:
    """``spec`` as an ``nn.Module``: a module is returned as is, a config ``dict(type=...)`` is built.

    ``what`` names the argument in the error raised for anything else.
    """
    reason = external_reason(spec, what, _COMPONENTS)
    if reason is not None:
        raise ConfigError(reason)
    if isinstance(spec, Mapping):
        if "type" not in spec:
            raise ConfigError(f"{what} config needs a 'type' key, e.g. dict(type='ZooModel', name='digits_cnn'); got "
                              f"{dict(spec)!r}. Registered types: {', '.join(component_names())}.")
        spec = build_component(spec)
    if not isinstance(spec, nn.Module):
        raise ConfigError(f"{what} must be a torch.nn.Module or a config dict with a 'type', got "
                          f"{type(spec).__name__}.")
    return spec
