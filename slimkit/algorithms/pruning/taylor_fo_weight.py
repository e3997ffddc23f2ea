"""taylor_fo_weight: remove the filters whose loss contribution (first-order Taylor) is smallest, on real data."""

from __future__ import annotations

from slimkit.algorithms.pruning._data import StatisticsPruner
from slimkit.core.registry import register
from slimkit.engines.pruning import TaylorFOWeightFilterPruner


@register
class TaylorFOWeight(StatisticsPruner):
    """Taylor first-order filter pruning: drop filters whose removal changes the loss least, estimated on data.

    A filter's importance is the squared sum of weight x gradient over its weights, averaged over ``batches``
    train batches of ``cfg.data`` (loss: cross-entropy between the model's logits and the batch targets, or
    the model's own ``.loss``). Weights are not updated. Selection and speedup as ``l1_filter``.
    """

    algorithm_name = "taylor_fo_weight"
    aliases = ("taylorfo", "taylor_fo_weight_filter", "TaylorFOWeightPruner")
    references = {"Paper": "https://arxiv.org/abs/1906.10771",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#taylorfoweightfilter-pruner"}
    engine = TaylorFOWeightFilterPruner
