"""l2_filter: remove the output filters with the smallest L2 norm, then shrink the layers for real."""

from __future__ import annotations

from slimkit.algorithms.pruning._framework import FrameworkPruner
from slimkit.core.registry import register
from slimkit.engines.pruning import L2FilterPruner


@register
class L2Filter(FrameworkPruner):
    """Filter pruning by L2 norm: each selected Conv/Linear layer loses the output channels with the smallest norm.

    Same selection, dependency-aware masks and speedup as ``l1_filter``; the Euclidean norm weighs large
    weights more than the L1 norm does. ``dims`` as in ``l1_filter`` (heads are ranked by the L2 norms of their
    q/k/v rows).
    """

    algorithm_name = "l2_filter"
    aliases = ("l2", "L2NormPruner", "torch_structured")  # Pruna: torch-pruning's default MagnitudeImportance(p=2)
    references = {"NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#l2filter-pruner"}
    engine = L2FilterPruner
    head_importance = "l2"
