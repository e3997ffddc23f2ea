"""The bottom layer: the algorithm contract, THE registry, hyperparameter helpers, selection, atomic io.

Nothing here imports a slimkit package above ``core`` (``tests/test_architecture.py`` enforces it). The names below
load on first use (:mod:`slimkit.core.lazy`): ``from slimkit.core.groups import GROUPS`` needs no torch.
"""

from typing import TYPE_CHECKING

from slimkit.core.groups import GROUPS, KIND_OF_GROUP
from slimkit.core.lazy import lazy_exports

if TYPE_CHECKING:
    from slimkit.core import registry
    from slimkit.core.contract import (
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

_CONTRACT = ("SaveFn", "SlimkitAlgorithm", "SlimkitBatcher", "SlimkitCacher", "SlimkitCompiler", "SlimkitDistiller",
             "SlimkitPruner", "SlimkitQuantizer", "SlimkitRecoverer", "SmashConfigPrefixWrapper")
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(_CONTRACT, "slimkit.core.contract"),
    "register": "slimkit.core.registry",
    "registry": "slimkit.core.registry",
})
