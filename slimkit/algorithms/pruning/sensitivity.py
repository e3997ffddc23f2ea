"""sensitivity: per-layer sparsities from a sensitivity analysis on validation data, raised step by step."""

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
from slimkit.engines.pruning import Pruner, SensitivityPruner


@register
class Sensitivity(BaseAlgoPruner):
    """Sensitivity pruning: each layer loses weights in proportion to how much of it the model tolerates.

    Every step analyses the current model (``slimkit.engines.pruning.sensitivity_analysis``: each selected
    layer alone pruned at 10%, 20%, ... and scored on the validation split), takes per layer the largest
    sparsity whose accuracy stays within ``acc_drop_threshold`` of the current model's, allocates the next
    ``sparsity_per_iter`` of overall sparsity in proportion to those tolerances (no layer goes down), and
    fine-tunes ``finetune_steps`` steps; until the overall ``sparsity`` of the selected weights is reached.
    """

    algorithm_name = "sensitivity"
    references = {"NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#sensitivity-pruner",
                  "Paper (layer sensitivity)": "https://arxiv.org/abs/1608.08710"}
    engine = SensitivityPruner
    engine_args = ("base_algo", "sparsity_per_iter", "acc_drop_threshold")
    recorded = {"allocation": "allocation", "steps": "history"}

    def extra_hyperparameters(self) -> list:
        """Step size, tolerance, fine-tuning between steps and the metric."""
        return [
            base_algo_hyperparameter(),
            real("sparsity_per_iter", 0.01, 0.99, 0.1, "Overall sparsity added at each step."),
            real("acc_drop_threshold", 0.0, 1.0, 0.05, "Metric drop a layer may cause alone and still count as "
                 "tolerant (in the metric's units: 0.05 = 5 points of accuracy)."),
            integer("finetune_steps", 0, 10**6, 20, "Optimizer steps of fine-tuning after each step (0: none)."),
            cap_hyperparameter(),
            *evaluator_hyperparameters(None),
            *training_hyperparameters(lr=1e-3),
        ]

    def build_pruner(self, model: nn.Module, config_list: list[dict[str, Any]],
                     smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """SensitivityPruner scored on the validation split, fine-tuned on the train split."""
        evaluate, mode = make_evaluator(self.algorithm_name, smash_config, finetune_steps=0)
        tune = make_finetuner(self.algorithm_name, smash_config, int(smash_config["finetune_steps"]))
        return SensitivityPruner(model, with_cap(config_list, smash_config), evaluate, finetuner=tune,
                                 optimize_mode=mode, **self.engine_kwargs(smash_config))
