"""activation_mean_rank: remove the filters with the smallest mean activation, on real data."""

from __future__ import annotations

from slimkit.algorithms.pruning._data import ActivationRankPruner
from slimkit.core.registry import register
from slimkit.engines.pruning import ActivationMeanRankFilterPruner


@register
class ActivationMeanRank(ActivationRankPruner):
    """Mean-activation filter pruning: drop the filters whose activations are smallest on average.

    Statistics come from ``batches`` train batches of ``cfg.data`` after ``activation`` (ReLU by default) is
    applied to each selected layer's output. Selection and speedup as ``l1_filter``.
    """

    algorithm_name = "activation_mean_rank"
    aliases = ("mean_activation", "activation_mean_rank_filter", "ActivationMeanRankPruner")
    references = {"Paper": "https://arxiv.org/abs/1611.06440",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#activationmeanrankfilter-pruner"}
    engine = ActivationMeanRankFilterPruner
