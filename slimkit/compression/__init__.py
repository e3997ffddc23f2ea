"""NNI-shaped compression engines: pruning (masks, wrappers, pruners) and speedup (physical channel removal)."""

from slimkit.compression.pruning import *  # noqa: F403
from slimkit.compression.pruning import __all__ as _pruning_all
from slimkit.compression.speedup import *  # noqa: F403
from slimkit.compression.speedup import __all__ as _speedup_all

__all__ = sorted(set(_pruning_all) | set(_speedup_all))  # noqa: PLE0605
