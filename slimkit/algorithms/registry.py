"""The one algorithm registry: explicit, loud registration; stage order and symmetric compatibility."""

from __future__ import annotations

import re
from typing import Any

from slimkit.algorithms.base import GROUPS, SaveFn, SlimkitAlgorithm
from slimkit.errors import AlgorithmNotFoundError, RegistryError, closest

_REGISTRY: dict[str, type[SlimkitAlgorithm]] = {}
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


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
    _REGISTRY[name] = cls
    return cls


def names() -> list[str]:
    """All registered algorithm names, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> type[SlimkitAlgorithm]:
    """The algorithm class registered as ``name``; unknown names list the valid ones."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise AlgorithmNotFoundError(
            f"Unknown algorithm {name!r}.{closest(str(name), _REGISTRY)} Valid algorithms: {', '.join(names())}."
        ) from None


def by_group(group: str) -> list[str]:
    """Registered names of one group, sorted."""
    return sorted(n for n, c in _REGISTRY.items() if c.group == group)


def _allowed(cls: type[SlimkitAlgorithm], other_group: str) -> list[str] | str:
    return cls.compatible_algorithms.get(other_group, "*")


def compatible(a: str, b: str) -> tuple[bool, str]:
    """Whether algorithms ``a`` and ``b`` may be applied together, and why not when they may not.

    The relation is symmetric by construction: both sides must allow each other.
    """
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
    hps = []
    from slimkit.config.hyperparameters import describe_allowed, to_jsonable

    for hp in cls().get_hyperparameters():
        hps.append(
            {
                "name": f"{name}_{hp.name}",
                "default": to_jsonable(hp.default_value),
                "allowed": describe_allowed(hp),
                "desc": (hp.meta or {}).get("desc", ""),
            }
        )
    return {
        "name": name,
        "group": cls.group,
        "description": cls.description(),
        "devices": [d for d, ok in (("cpu", cls.run_on_cpu), ("cuda", cls.run_on_cuda)) if ok],
        "requires": [c for c, ok in (("tokenizer", cls.tokenizer_required), ("processor", cls.processor_required),
                                     ("dataset", cls.dataset_required)) if ok],
        "save_fn": cls.save_fn.value,
        "references": dict(cls.references),
        "hyperparameters": hps,
    }
