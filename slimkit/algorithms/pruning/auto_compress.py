"""auto_compress: AutoCompress, rounds of simulated-annealing allocation and ADMM pruning on real data."""

from __future__ import annotations

from typing import Any

from torch import nn

from slimkit.algorithms.pruning._data import train_loader
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
from slimkit.core.hyperparameters import integer, real
from slimkit.core.registry import register
from slimkit.engines.pruning import AutoCompressEngine, Pruner
from slimkit.training import make_optimizer


@register
class AutoCompress(BaseAlgoPruner):
    """AutoCompress: in ``num_iterations`` rounds, anneal per-layer sparsities, then ADMM-prune toward them.

    After round ``k`` the selected layers are at ``1 - (1 - sparsity)^(k / num_iterations)``. Each round runs
    simulated annealing (as ``simulated_annealing``) for the allocation, trains on ``cfg.data`` with the ADMM
    penalty toward it (``admm_num_iterations`` rounds of ``admm_training_epochs`` epochs, penalty ``row``) and
    prunes hard; a layer never gets back what an earlier round pruned.
    """

    algorithm_name = "auto_compress"
    references = {"Paper": "https://arxiv.org/abs/1907.03141",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#autocompress-pruner"}
    engine = AutoCompressEngine
    engine_args = ("num_iterations", "base_algo", "admm_num_iterations", "admm_training_epochs", "row", "seed",
                   *ANNEALING)

    def extra_hyperparameters(self) -> list:
        """Rounds, annealing, ADMM, evaluator and training settings."""
        return [
            base_algo_hyperparameter(),
            integer("num_iterations", 1, 1000, 2, "Rounds of allocation + ADMM pruning."),
            *annealing_hyperparameters(),
            integer("admm_num_iterations", 1, 10000, 3, "ADMM rounds in each AutoCompress round."),
            integer("admm_training_epochs", 1, 1000, 1, "Epochs over the train data in each ADMM W-step."),
            real("row", 1e-6, 100.0, 0.1, "ADMM penalty rho.", log=True),
            cap_hyperparameter(),
            *evaluator_hyperparameters(20),
            *training_hyperparameters(lr=1e-2),
        ]

    def build_pruner(self, model: nn.Module, config_list: list[dict[str, Any]],
                     smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """AutoCompressPruner: validation evaluator, ADMM on the seeded train loader through slimkit's loop."""
        evaluate, mode = make_evaluator(self.algorithm_name, smash_config)
        optimizer = make_optimizer(smash_config["optimizer"], model.parameters(), lr=float(smash_config["lr"]))
        return AutoCompressEngine(
            model, with_cap(config_list, smash_config), evaluator=evaluate, optimize_mode=mode,
            dataloader=train_loader(self.algorithm_name, smash_config), optimizer=optimizer,
            **self.engine_kwargs(smash_config))

    def run_pruner(self, pruner: Pruner, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> None:
        """Run the rounds; record the allocation and the ADMM residuals."""
        assert isinstance(pruner, AutoCompressEngine)
        pruner.compress()
        smash_config.state.update(allocation=pruner.allocation,
                                  residuals=[[round(r, 6) for r in rnd] for rnd in pruner.residuals])
