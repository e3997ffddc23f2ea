"""net_adapt: NetAdapt, prune one layer at a time and keep the proposal that fine-tunes best."""

from __future__ import annotations

from typing import Any

from torch import nn

from slimkit.algorithms.pruning._search import (
    BaseAlgoPruner,
    base_algo_hyperparameter,
    cap_hyperparameter,
    evaluator_hyperparameters,
    make_evaluator,
    make_finetuner,
    training_hyperparameters,
    with_cap,
)
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import integer, real
from slimkit.core.registry import register
from slimkit.engines.pruning import NetAdaptPruner, Pruner


@register
class NetAdapt(BaseAlgoPruner):
    """NetAdapt: reach the overall sparsity in steps, each step shrinking the one layer that hurts least.

    Each step removes ``sparsity_per_iteration`` of the selected weights: for every layer that can give that
    much alone, the proposal is fine-tuned ``finetune_steps`` steps on ``cfg.data`` and scored on the
    validation split; the best proposal (with its fine-tuned weights) is kept. Layers end with different
    sparsities, chosen by measurement.
    """

    algorithm_name = "net_adapt"
    references = {"Paper": "https://arxiv.org/abs/1804.03230",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#netadapt-pruner"}
    engine = NetAdaptPruner
    engine_args = ("base_algo", "sparsity_per_iteration")
    recorded = {"allocation": "allocation", "proposals": "history"}

    def extra_hyperparameters(self) -> list:
        """Step size, short-term fine-tuning, the metric and training settings."""
        return [
            base_algo_hyperparameter(),
            real("sparsity_per_iteration", 0.01, 0.99, 0.1, "Overall sparsity removed per step."),
            integer("finetune_steps", 0, 10**6, 10, "Short-term fine-tuning steps of every proposal (0: none)."),
            cap_hyperparameter(),
            *evaluator_hyperparameters(None),
            *training_hyperparameters(lr=1e-3),
        ]

    def build_pruner(self, model: nn.Module, config_list: list[dict[str, Any]],
                     smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """NetAdaptPruner with the train-split fine-tuner and the validation evaluator."""
        evaluate, mode = make_evaluator(self.algorithm_name, smash_config, finetune_steps=0)
        tune = make_finetuner(self.algorithm_name, smash_config, int(smash_config["finetune_steps"]))
        return NetAdaptPruner(model, with_cap(config_list, smash_config), tune, evaluate, optimize_mode=mode,
                              **self.engine_kwargs(smash_config))
