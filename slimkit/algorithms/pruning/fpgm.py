"""fpgm: remove the filters nearest the geometric median of their layer, then shrink the layers for real."""

from __future__ import annotations

from slimkit.algorithms.pruning._framework import FrameworkPruner
from slimkit.core.registry import register
from slimkit.engines.pruning import FPGMEngine


@register
class FPGM(FrameworkPruner):
    """Filter Pruning via Geometric Median: remove the most replaceable filters of each selected Conv/Linear layer.

    A filter's importance is its summed distance to the layer's other filters; those nearest the geometric
    median carry information the others already hold. Same selection and speedup as ``l1_filter``.
    """

    algorithm_name = "fpgm"
    references = {"Paper": "https://arxiv.org/abs/1811.00250",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#fpgm-pruner"}
    engine = FPGMEngine
