"""simulated_annealing: per-layer sparsities found by simulated annealing, scored on validation data."""

from __future__ import annotations

from typing import Any

from torch import nn

from slimkit.algorithms.pruning._search import (
    ANNEALING,
    BaseAlgoPruner,
    annealing_hyperparameters,
    base_algo_hyperparameter,
    cap_hyperparameter,
    evaluator_hyperparameters,
    make_evaluator,
    training_hyperparameters,
    with_cap,
)
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.pruning import Pruner, SimulatedAnnealingEngine


@register
class SimulatedAnnealing(BaseAlgoPruner):
    """Simulated annealing over per-layer sparsities at one overall target, scored on the validation split.

    Starting from every layer at ``sparsity``, each step perturbs the layers' shares, rescales them back onto
    the overall target and scores the candidate (a copy fine-tuned ``eval_finetune_steps`` steps on
    ``cfg.data``, then its validation accuracy). Better candidates are always taken, worse ones with a
    probability that falls as the temperature cools; the best candidate seen is pruned and, like the copy it
    was scored on, fine-tuned ``eval_finetune_steps`` steps.
    """

    algorithm_name = "simulated_annealing"
    references = {"Paper (AutoCompress)": "https://arxiv.org/abs/1907.03141",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#simulatedannealing-pruner"}
    engine = SimulatedAnnealingEngine
    engine_args = ("base_algo", "seed", *ANNEALING)
    recorded = {"allocation": "allocation", "candidates": "history"}
    tune_chosen = True

    def extra_hyperparameters(self) -> list:
        """Schedule, evaluator and training settings."""
        return [base_algo_hyperparameter(), *annealing_hyperparameters(), cap_hyperparameter(),
                *evaluator_hyperparameters(20), *training_hyperparameters(lr=1e-3)]

    def build_pruner(self, model: nn.Module, config_list: list[dict[str, Any]],
                     smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """SimulatedAnnealingPruner with the validation evaluator."""
        evaluate, mode = make_evaluator(self.algorithm_name, smash_config)
        return SimulatedAnnealingEngine(model, with_cap(config_list, smash_config), evaluate, optimize_mode=mode,
                                        **self.engine_kwargs(smash_config))
