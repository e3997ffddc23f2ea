"""movement: movement pruning, scores learned while fine-tuning on real data decide what goes."""

from __future__ import annotations

from typing import Any

from torch import nn

from slimkit.algorithms.pruning._data import train_loader
from slimkit.algorithms.pruning._framework import FrameworkPruner
from slimkit.algorithms.pruning._search import training_hyperparameters
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import choice, integer
from slimkit.core.registry import register
from slimkit.engines.nas.constraints import calibrate_bn
from slimkit.engines.pruning import MovementEngine, Pruner
from slimkit.engines.pruning.one_shot import FILTER_OP_TYPES, LEVEL_OP_TYPES
from slimkit.training import fit, make_optimizer


@register
class Movement(FrameworkPruner):
    """Movement pruning: fine-tune on ``cfg.data`` and keep the weights that move away from zero.

    Each weight's score learns ``-sum(dL/dW' * W)`` over the fine-tuning (straight-through through the mask);
    the masks keep the top scores at a sparsity that rises on a cubic schedule to its final value after two
    thirds of the ``epochs`` and stays there for the rest. ``granularity="filter"`` (default) scores whole output
    channels, which the speedup removes; ``"fine"`` scores single weights (unstructured, zeros kept).
    """

    algorithm_name = "movement"
    references = {"Paper": "https://arxiv.org/abs/2005.07683",
                  "NNI": "https://nni.readthedocs.io/en/v2.6/reference/compression/pruner.html#movement-pruner"}
    dataset_required = True
    engine = MovementEngine

    def extra_hyperparameters(self) -> list:
        """Granularity, schedule and training settings."""
        return [
            choice("granularity", ["filter", "fine"], "filter", "filter: rank output channels (removed by the "
                   "speedup); fine: rank single weights (unstructured)."),
            integer("epochs", 1, 1000, 3, "Fine-tuning epochs over the train data."),
            integer("warm_up_step", 0, 10**9, 0, "Optimizer steps of dense fine-tuning before pruning starts."),
            *training_hyperparameters(lr=1e-3),
        ]

    def op_types(self, smash_config: SmashConfigPrefixWrapper) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
        """Filters: Conv/Linear; single weights: any weighted layer."""
        return ("Conv2d", "Linear"), FILTER_OP_TYPES if smash_config["granularity"] == "filter" else LEVEL_OP_TYPES

    def uses_speedup(self, smash_config: SmashConfigPrefixWrapper) -> bool:
        """Channels can be removed; single weights cannot."""
        return smash_config["granularity"] == "filter" and bool(smash_config["speedup"])

    def build_pruner(self, model: nn.Module, config_list: list[dict[str, Any]],
                     smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """MovementPruner whose schedule ends after two thirds of the planned steps."""
        steps = int(smash_config["epochs"]) * len(train_loader(self.algorithm_name, smash_config))
        warm_up = int(smash_config["warm_up_step"])
        optimizer = make_optimizer(smash_config["optimizer"], model.parameters(), lr=float(smash_config["lr"]))
        return MovementEngine(model, config_list, optimizer=optimizer, warm_up_step=warm_up,
                              cool_down_beginning_step=max(warm_up + 1, warm_up + 2 * (steps - warm_up) // 3),
                              granularity=smash_config["granularity"])

    def run_pruner(self, pruner: Pruner, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> None:
        """Fine-tune with slimkit's loop (each optimizer step moves the masks), fix the final masks, recalibrate BN."""
        assert isinstance(pruner, MovementEngine)
        pruner.compress()
        result = fit(model, train_loader(self.algorithm_name, smash_config), optimizer=pruner.optimizer,
                     epochs=int(smash_config["epochs"]), seed=int(smash_config["seed"]), desc=self.algorithm_name)
        pruner.finish()
        # the masks moved at every step, so the batch norms' running statistics mix many masks: measured afresh
        # under the final ones (on an AVX-512 host the mixed statistics cost 0.99 -> 0.40 test accuracy on digits)
        calibrate_bn(model, train_loader(self.algorithm_name, smash_config))
        smash_config.state.update(train_steps=result.steps, final_loss=round(result.final_loss, 6))
