"""Shared base of the two activation-ranking smash pruners (APoZ and mean activation)."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from slimkit.algorithms.pruning._data import batch_hyperparameters, statistics_batches
from slimkit.algorithms.pruning._framework import FrameworkPruner
from slimkit.algorithms.pruning._selection import choice
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.engines.pruning import Pruner


class ActivationRankPruner(FrameworkPruner):
    """Rank filters by statistics of their activations on ``batches`` train batches (not registered)."""

    dataset_required: ClassVar[bool] = True

    def extra_hyperparameters(self) -> list:
        """Activation applied to the layer outputs, number of batches, batch size."""
        return [
            choice("activation", ["relu", "relu6"], "relu", "Activation applied to each layer's output before the "
                   "statistics are taken."),
            *batch_hyperparameters(),
        ]

    def build_pruner(self, model: nn.Module, config_list: list, smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """The activation pruner fed the first train batches (forward passes only)."""
        batches = statistics_batches(self.algorithm_name, model, smash_config)
        return self.engine(model, config_list, activation=smash_config["activation"], dataloader=batches,
                                 statistics_batch_num=len(batches))
