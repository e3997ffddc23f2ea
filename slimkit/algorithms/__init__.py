"""Smash-level algorithms, one file each, in a folder per group. Every module listed here must import.

Adding an algorithm: write ``<group folder>/<algorithm_name>.py`` with a ``@register``-ed class and add the
module path below. A module that fails to import raises instead of leaving a silently missing algorithm.
"""

from __future__ import annotations

import importlib

from slimkit.algorithms.base import (
    GROUPS,
    SaveFn,
    SlimkitAlgorithm,
    SlimkitBatcher,
    SlimkitCacher,
    SlimkitCompiler,
    SlimkitDistiller,
    SlimkitPruner,
    SlimkitQuantizer,
    SlimkitRecoverer,
)
from slimkit.algorithms.registry import register
from slimkit.errors import RegistryError

ALGORITHM_MODULES: tuple[str, ...] = (
    "slimkit.algorithms.pruning.torch_unstructured",
    "slimkit.algorithms.quantization.half",
    "slimkit.algorithms.quantization.int8_dynamic",
    "slimkit.algorithms.compilation.torch_compile",
)


def _load_all() -> None:
    from slimkit.algorithms import registry

    for module in ALGORITHM_MODULES:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise RegistryError(f"Algorithm module {module} failed to import: {exc!r}") from exc
    registry.check_consistency()


_load_all()

__all__ = [
    "GROUPS",
    "SaveFn",
    "SlimkitAlgorithm",
    "SlimkitBatcher",
    "SlimkitCacher",
    "SlimkitCompiler",
    "SlimkitDistiller",
    "SlimkitPruner",
    "SlimkitQuantizer",
    "SlimkitRecoverer",
    "register",
]
