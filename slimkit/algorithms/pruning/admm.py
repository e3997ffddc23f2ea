"""admm: ADMM pruning, train toward a sparse projection of the weights on real data, then prune hard."""

from __future__ import annotations

from torch import nn

from slimkit.algorithms.pruning._data import train_loader
from slimkit.algorithms.pruning._search import BaseAlgoPruner, base_algo_hyperparameter, training_hyperparameters
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import integer, real
from slimkit.core.registry import register
from slimkit.engines.pruning import ADMMEngine, Pruner
from slimkit.training import make_optimizer


@register
class ADMM(BaseAlgoPruner):
    """ADMM pruning: alternate training toward a sparse copy of the weights with projecting onto sparsity.

    For ``num_iterations`` rounds: train ``training_epochs`` epochs on ``cfg.data`` with the augmented term
    ``row/2 * ||W - Z + U||^2`` (W-step), set ``Z`` to the projection of ``W + U`` onto each layer's sparsity
    (Z-step), add ``W - Z`` to the dual ``U``; then prune to that sparsity for real. The weights arrive sparse,
    so the hard pruning costs little accuracy. ``base_algo`` ranks filters (removed with the speedup) or
    single weights (``level``).
    """

    algorithm_name = "admm"
    references = {"Paper": "https://arxiv.org/abs/1804.03294",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#admm-pruner"}
    engine = ADMMEngine
    engine_args = ("num_iterations", "training_epochs", "row", "base_algo", "seed")

    def extra_hyperparameters(self) -> list:
        """Ranking, ADMM rounds and the training of the W-step."""
        return [
            base_algo_hyperparameter(),
            integer("num_iterations", 1, 10000, 6, "ADMM rounds (W-step, Z-step, U-step)."),
            integer("training_epochs", 1, 1000, 1, "Epochs over the train data in each W-step."),
            real("row", 1e-6, 100.0, 0.1, "Penalty rho of the augmented Lagrangian: how hard the weights are pulled "
                 "toward their sparse projection.", log=True),
            *training_hyperparameters(lr=1e-2),
        ]

    def build_pruner(self, model: nn.Module, config_list: list, smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """ADMMPruner training on the seeded train loader through slimkit's loop."""
        optimizer = make_optimizer(smash_config["optimizer"], model.parameters(), lr=float(smash_config["lr"]))
        return ADMMEngine(model, config_list, dataloader=train_loader(self.algorithm_name, smash_config),
                          optimizer=optimizer, **self.engine_kwargs(smash_config))

    def run_pruner(self, pruner: Pruner, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> None:
        """Run the rounds, prune hard; record the residual ||W - Z|| of every round."""
        pruner.compress()
        smash_config.state["residuals"] = [round(r, 6) for r in pruner.residuals]
