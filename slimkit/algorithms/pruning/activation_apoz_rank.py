"""activation_apoz_rank: remove the filters whose activations are most often zero (APoZ), on real data."""

from __future__ import annotations

from slimkit.algorithms.pruning._data import ActivationRankPruner
from slimkit.core.registry import register
from slimkit.engines.pruning import ActivationAPoZRankFilterPruner


@register
class ActivationAPoZRank(ActivationRankPruner):
    """APoZ filter pruning: drop the filters with the highest Average Percentage of Zeros in their activations.

    Statistics come from ``batches`` train batches of ``cfg.data`` after ``activation`` (ReLU by default) is
    applied to each selected layer's output; a filter that is mostly zero contributes little. Selection and
    speedup as ``l1_filter``.
    """

    algorithm_name = "activation_apoz_rank"
    aliases = ("apoz", "activation_apoz_rank_filter", "ActivationAPoZRankPruner")
    references = {"Paper": "https://arxiv.org/abs/1607.03250",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#activationapozrankfilter-pruner"}
    engine = ActivationAPoZRankFilterPruner
