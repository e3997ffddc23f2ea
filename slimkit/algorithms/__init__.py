"""Smash-level algorithms, one file each, in a folder per group. Every module listed here must import.

The contract an algorithm implements (``SlimkitAlgorithm``, ``SaveFn``, ``register``...) lives in
:mod:`slimkit.core`. Adding an algorithm: write ``<group folder>/<algorithm_name>.py`` with a ``@register``-ed
class whose ``algorithm_name`` is the file name. Every such module is imported at start-up; one that fails to import, or
that registers no algorithm of its name, raises instead of leaving a silently missing algorithm.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from slimkit.errors import RegistryError

#: One folder per group; every public module in them (name not starting with "_") is one algorithm.
GROUP_PACKAGES: tuple[str, ...] = (
    "pruning",
    "distillation",
    "recovery",
    "quantization",
    "caching",
    "compilation",
    "batching",
)


def algorithm_modules() -> list[str]:
    """Dotted names of every algorithm module, found by listing the group folders (no hand-kept list)."""
    root = Path(__file__).parent
    found = []
    for package in GROUP_PACKAGES:
        for info in sorted(pkgutil.iter_modules([str(root / package)]), key=lambda i: i.name):
            if not info.name.startswith("_"):
                found.append(f"slimkit.algorithms.{package}.{info.name}")
    return found


def _load_all(modules: list[str] | None = None) -> None:
    """Import every algorithm module; a failed import or a file without its algorithm raises RegistryError."""
    from slimkit.core import registry

    for module in algorithm_modules() if modules is None else modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise RegistryError(f"Algorithm module {module} failed to import: {exc!r}") from exc
        file_name = module.rsplit(".", 1)[-1]
        if file_name not in registry.names() or registry.get(file_name).__module__ != module:
            raise RegistryError(
                f"{module} must register an algorithm named {file_name!r} (one algorithm per file, named like it); "
                "put shared helpers in a module whose name starts with '_'."
            )
    registry.check_consistency()


_load_all()

__all__ = ["GROUP_PACKAGES", "algorithm_modules"]
