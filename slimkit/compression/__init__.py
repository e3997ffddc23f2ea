"""NNI-shaped compression engines (pruning, speedup, quantization)."""

from slimkit.compression.pruning import *  # noqa: F403
from slimkit.compression.pruning import __all__ as _pruning_all

__all__ = sorted(_pruning_all)
