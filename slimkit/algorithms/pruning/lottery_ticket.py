"""lottery_ticket: iterative magnitude pruning with rewinding to the starting (or early) weights, on real data."""

from __future__ import annotations

from typing import Any

from torch import nn

from slimkit.algorithms.pruning._data import train_loader
from slimkit.algorithms.pruning._search import BaseAlgoPruner, base_algo_hyperparameter, training_hyperparameters
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import integer
from slimkit.core.registry import register
from slimkit.engines.pruning import LotteryTicketEngine, Pruner
from slimkit.training import fit, make_optimizer


@register
class LotteryTicket(BaseAlgoPruner):
    """Lottery ticket: train, prune the smallest weights, rewind the rest to their starting values, repeat.

    Round 0 trains the model ``epochs`` epochs on ``cfg.data``; each of the ``prune_iterations`` rounds then
    prunes so the layer reaches ``1 - (1 - sparsity)^(k / prune_iterations)``, rewinds the surviving weights to
    the values the model had when training began (``rewind_step > 0``: after that many optimizer steps, "late
    rewinding") with a fresh optimizer state, and trains ``epochs`` epochs again. ``base_algo="level"`` is the
    paper's unstructured pruning; the filter rankings (default ``l1``) let the speedup remove channels.
    """

    algorithm_name = "lottery_ticket"
    references = {"Paper": "https://arxiv.org/abs/1803.03635",
                  "Rewinding": "https://arxiv.org/abs/1912.05671",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#lottery-ticket-hypothesis"}
    engine = LotteryTicketEngine
    engine_args = ("base_algo", "rewind_step")

    def extra_hyperparameters(self) -> list:
        """Rounds, epochs per round, rewind point and training settings."""
        return [
            base_algo_hyperparameter(),
            integer("prune_iterations", 1, 1000, 3, "Pruning rounds after the dense round 0."),
            integer("epochs", 1, 1000, 1, "Training epochs in every round."),
            integer("rewind_step", 0, 10**9, 0, "Rewind to the weights after this many optimizer steps of round 0 (0: "
                    "the weights the model came with)."),
            *training_hyperparameters(lr=1e-3),
        ]

    def build_pruner(self, model: nn.Module, config_list: list[dict[str, Any]],
                     smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """LotteryTicketPruner over an optimizer of the model; every entry gets the rounds."""
        rounds = int(smash_config["prune_iterations"])
        entries = [e if e.get("exclude") else {"prune_iterations": rounds, **e} for e in config_list]
        optimizer = make_optimizer(smash_config["optimizer"], model.parameters(), lr=float(smash_config["lr"]))
        return LotteryTicketEngine(model, entries, optimizer, **self.engine_kwargs(smash_config))

    def run_pruner(self, pruner: Pruner, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> None:
        """Round 0 and every pruning round: (prune, rewind,) train ``epochs`` epochs with slimkit's loop."""
        assert isinstance(pruner, LotteryTicketEngine)
        pruner.compress()
        loader = train_loader(self.algorithm_name, smash_config)
        losses = []
        for k in pruner.get_prune_iterations():
            pruner.prune_iteration_start()
            result = fit(model, loader, optimizer=pruner.optimizer, epochs=int(smash_config["epochs"]),
                         seed=int(smash_config["seed"]) + k, desc=f"{self.algorithm_name} round {k}")
            losses.append(round(result.final_loss, 6))
        smash_config.state.update(round_final_losses=losses, train_steps=pruner.step_count)
