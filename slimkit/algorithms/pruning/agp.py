"""agp: Automated Gradual Pruning, fine-tune on real data while the sparsity rises on a cubic schedule."""

from __future__ import annotations

from torch import nn

from slimkit.algorithms.pruning._data import batch_hyperparameters, train_loader
from slimkit.algorithms.pruning._search import BaseAlgoPruner
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import choice, integer, real
from slimkit.core.registry import register
from slimkit.engines.pruning import AGPEngine, Pruner
from slimkit.training import fit, make_optimizer


@register
class AGP(BaseAlgoPruner):
    """Automated Gradual Pruning: train on ``cfg.data`` while each layer's sparsity rises from ``initial_sparsity``.

    The target follows ``final + (initial - final) * (1 - t / n)^3``; masks are recomputed every ``frequency``
    optimizer steps, reach the final sparsity after two thirds of the ``epochs`` and stay there while the
    last third fine-tunes (loss: cross-entropy on the batch targets, or the model's ``.loss``).
    ``pruning_algorithm`` ranks filters (``l1``/``l2``/``fpgm``, then shrunk with the speedup) or single
    weights (``level``, zeros kept in the weights).
    """

    algorithm_name = "agp"
    references = {"Paper": "https://arxiv.org/abs/1710.01878",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#agp-pruner"}
    engine = AGPEngine
    ranking = "pruning_algorithm"

    def extra_hyperparameters(self) -> list:
        """Masker, schedule and training settings."""
        return [
            choice("pruning_algorithm", ["l1", "l2", "fpgm", "level"], "l1", "How units are ranked: filter norms (l1, "
                   "l2), geometric median (fpgm) or single weights (level, unstructured)."),
            real("initial_sparsity", 0.0, 0.99, 0.0, "Sparsity at the first step (must not exceed the final one)."),
            integer("epochs", 1, 1000, 2, "Passes over the train data."),
            real("lr", 1e-6, 1.0, 1e-3, "Learning rate of the fine-tuning.", log=True),
            choice("optimizer", ["adam", "sgd"], "adam", "adam, or sgd with momentum 0.9."),
            integer("frequency", 1, 100000, 1, "Optimizer steps between two mask updates."),
            *batch_hyperparameters(batches=None),
            integer("seed", 0, 2**31 - 1, 0, "Seed of the data shuffling."),
        ]

    def build_pruner(self, model: nn.Module, config_list: list, smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """AGPPruner with an optimizer whose steps drive the schedule."""
        steps = int(smash_config["epochs"]) * len(train_loader(self.algorithm_name, smash_config))
        frequency = int(smash_config["frequency"])
        optimizer = make_optimizer(smash_config["optimizer"], model.parameters(), lr=float(smash_config["lr"]))
        return AGPEngine(model, config_list, optimizer, pruning_algorithm=smash_config["pruning_algorithm"],
                         initial_sparsity=float(smash_config["initial_sparsity"]),
                         num_iterations=max(1, (2 * steps // 3) // frequency), frequency=frequency)

    def run_pruner(self, pruner: Pruner, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> None:
        """Train; if the schedule did not reach its end (fewer steps than planned), apply the final masks."""
        pruner.compress()
        result = fit(model, train_loader(self.algorithm_name, smash_config), optimizer=pruner.optimizer,
                     epochs=int(smash_config["epochs"]), seed=int(smash_config["seed"]), on_epoch=pruner.update_epoch,
                     desc=self.algorithm_name)
        if pruner.current_iteration < pruner.num_iterations:
            pruner.step_count = pruner.num_iterations * pruner.frequency
            pruner.update_mask()
        smash_config.state.update(train_steps=result.steps, final_loss=round(result.final_loss, 6))
