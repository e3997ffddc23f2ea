"""taylor_fo_weight: remove the filters whose loss contribution (first-order Taylor) is smallest, on real data."""

from __future__ import annotations

from torch import nn

from slimkit.algorithms.pruning._data import batch_hyperparameters, criterion_for, statistics_batches
from slimkit.algorithms.pruning._framework import FrameworkPruner
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.pruning import Pruner, TaylorFOWeightFilterPruner


@register
class TaylorFOWeight(FrameworkPruner):
    """Taylor first-order filter pruning: drop filters whose removal changes the loss least, estimated on data.

    A filter's importance is the squared sum of weight x gradient over its weights, averaged over ``batches``
    train batches of ``cfg.data`` (loss: cross-entropy between the model's logits and the batch targets, or
    the model's own ``.loss``). Weights are not updated. Selection and speedup as ``l1_filter``.
    """

    algorithm_name = "taylor_fo_weight"
    aliases = ("taylorfo", "taylor_fo_weight_filter", "TaylorFOWeightPruner")
    references = {"Paper": "https://arxiv.org/abs/1906.10771",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#taylorfoweightfilter-pruner"}
    dataset_required = True
    engine = TaylorFOWeightFilterPruner

    def extra_hyperparameters(self) -> list:
        """Number of batches and batch size."""
        return batch_hyperparameters()

    def build_pruner(self, model: nn.Module, config_list: list, smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """The Taylor pruner fed the first train batches."""
        batches = statistics_batches(self.algorithm_name, model, smash_config)
        return TaylorFOWeightFilterPruner(model, config_list, criterion=criterion_for(batches), dataloader=batches,
                                          statistics_batch_num=len(batches))
