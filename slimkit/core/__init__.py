"""The bottom layer: the algorithm contract, THE registry, hyperparameter helpers, selection, atomic io.

Nothing here imports a slimkit package above ``core`` (``tests/test_architecture.py`` enforces it).
"""

from slimkit.core import registry
from slimkit.core.contract import (
    GROUPS,
    KIND_OF_GROUP,
    SaveFn,
    SlimkitAlgorithm,
    SlimkitBatcher,
    SlimkitCacher,
    SlimkitCompiler,
    SlimkitDistiller,
    SlimkitPruner,
    SlimkitQuantizer,
    SlimkitRecoverer,
    SmashConfigPrefixWrapper,
)
from slimkit.core.registry import register

__all__ = [
    "GROUPS",
    "KIND_OF_GROUP",
    "SaveFn",
    "SlimkitAlgorithm",
    "SlimkitBatcher",
    "SlimkitCacher",
    "SlimkitCompiler",
    "SlimkitDistiller",
    "SlimkitPruner",
    "SlimkitQuantizer",
    "SlimkitRecoverer",
    "SmashConfigPrefixWrapper",
    "register",
    "registry",
]
