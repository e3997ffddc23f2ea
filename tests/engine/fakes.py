"""Throw-away algorithms registered only inside a test, to exercise engine checks that real ones rarely hit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from slimkit.core import contract as base
from slimkit.core import registry
from slimkit.core.contract import SlimkitAlgorithm

_GROUP_BASES = {cls.group: cls for cls in (base.SlimkitPruner, base.SlimkitDistiller, base.SlimkitRecoverer,
                                           base.SlimkitQuantizer, base.SlimkitCacher, base.SlimkitCompiler,
                                           base.SlimkitBatcher)}


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
    """Build an algorithm class (on its group's base class) that returns the model unchanged."""

    def _apply(self, model, smash_config):
        return model

    body = {"algorithm_name": name, "group": group, "__doc__": f"Fake {name} for tests.", "_apply": _apply, **attrs}
    return type(f"Fake_{name}", (_GROUP_BASES.get(group, SlimkitAlgorithm),), body)
