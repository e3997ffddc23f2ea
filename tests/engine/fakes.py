"""Throw-away algorithms registered only inside a test, to exercise engine checks that real ones rarely hit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from slimkit.algorithms import registry
from slimkit.algorithms.base import SlimkitAlgorithm


@contextlib.contextmanager
def registered(*classes: type[SlimkitAlgorithm]) -> Iterator[None]:
    """Register ``classes`` for the duration of the block, then remove them again."""
    try:
        for cls in classes:
            registry.register(cls)
        registry.check_consistency()
        yield
    finally:
        for cls in classes:
            registry._REGISTRY.pop(cls.algorithm_name, None)


def make(name: str, group: str, **attrs) -> type[SlimkitAlgorithm]:
    """Build an algorithm class that returns the model unchanged."""

    def _apply(self, model, smash_config):
        return model

    body = {"algorithm_name": name, "group": group, "__doc__": f"Fake {name} for tests.", "_apply": _apply, **attrs}
    return type(f"Fake_{name}", (SlimkitAlgorithm,), body)
