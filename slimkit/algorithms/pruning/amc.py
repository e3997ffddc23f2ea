"""amc: AMC, a DDPG agent allocates per-layer channel ratios under a MACs budget, scored on validation data."""

from __future__ import annotations

from typing import Any

from torch import nn

from slimkit.algorithms.pruning._framework import resolve_dummy_input
from slimkit.algorithms.pruning._search import (
    BaseAlgoPruner,
    base_algo_hyperparameter,
    evaluator_hyperparameters,
    make_evaluator,
    training_hyperparameters,
)
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import choice, integer, real
from slimkit.core.registry import register
from slimkit.engines.pruning import AMCEngine, Pruner


@register
class AMC(BaseAlgoPruner):
    """AMC: a reinforcement-learning agent (DDPG) picks how many channels each layer keeps under a MACs budget.

    The agent walks the selected layers, sees each layer's shape and MACs and what has been removed so far,
    and chooses a preserve ratio between ``1 - sparsity`` and 1; the ratio is capped so the model can still
    meet ``flops_ratio`` of its MACs. After each of ``episodes`` episodes the masks are scored on the
    validation split (optionally after ``eval_finetune_steps`` of fine-tuning a copy); the reward trains the
    agent, and the best allocation within the budget is pruned (and fine-tuned ``eval_finetune_steps`` steps,
    as its copy was when scored), then removed with the speedup. MACs are counted
    as ``slimkit.evaluation.count_macs`` counts them after the speedup (Conv/Linear, channels traced).
    """

    algorithm_name = "amc"
    references = {"Paper": "https://arxiv.org/abs/1802.03494",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#amc-pruner"}
    engine = AMCEngine
    default_sparsity = 0.8
    engine_args = ("flops_ratio", "reward", "channel_round", "warmup", "delta_decay", "seed", "base_algo")
    recorded = {"allocation": "allocation"}
    tune_chosen = True

    def get_hyperparameters(self) -> list:
        """As the other pruners, but ``sparsity`` is each layer's largest sparsity (AMC picks the actual one)."""
        hps = [hp for hp in super().get_hyperparameters() if hp.name != "sparsity"]
        cap = real("sparsity", 0.01, 0.99, self.default_sparsity, "Largest share of a layer's channels the agent may "
                   "prune (NNI's 1 - lbound); the MACs budget sets the total.")
        return [cap, *hps]

    def extra_hyperparameters(self) -> list:
        """Budget, episodes, agent and evaluator settings."""
        return [
            base_algo_hyperparameter(level=False),
            real("flops_ratio", 0.01, 1.0, 0.5, "Share of the model's MACs to keep (the budget)."),
            choice("reward", ["acc_reward", "acc_flops_reward"], "acc_reward", "acc_reward: the metric; "
                   "acc_flops_reward: -(1 - metric) * log(MACs), which also favours fewer MACs."),
            integer("episodes", 1, 100000, 120, "Search episodes (NNI's train_episode)."),
            integer("warmup", 0, 100000, 30, "Episodes of random actions before the agent acts."),
            integer("channel_round", 1, 1024, 8, "Kept channels are a multiple of this (when the layer has at least "
                    "that many)."),
            integer("hidden", 8, 4096, 64, "Width of the actor's and critic's two hidden layers."),
            real("delta_decay", 0.5, 1.0, 0.97, "Exploration noise factor per episode after warm-up (the noise starts "
                 "at std 0.5)."),
            *evaluator_hyperparameters(10),
            *training_hyperparameters(lr=1e-3),
        ]

    def build_pruner(self, model: nn.Module, config_list: list[dict[str, Any]],
                     smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """AMCPruner with the validation evaluator; MACs counted on the example inputs."""
        scored, mode = make_evaluator(self.algorithm_name, smash_config)
        evaluate = scored if mode == "maximize" else lambda m: -scored(m)  # AMC maximises its reward: minus the loss
        hidden = int(smash_config["hidden"])
        return AMCEngine(model, config_list, evaluate, lbound=1.0 - float(smash_config["sparsity"]), hidden1=hidden,
                         hidden2=hidden, train_episode=int(smash_config["episodes"]), bsize=64, rmsize=2000,
                         dummy_input=resolve_dummy_input(self.algorithm_name, model, smash_config),
                         **self.engine_kwargs(smash_config))

    def run_pruner(self, pruner: Pruner, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> None:
        """Search; record the allocation, its estimated MACs share and the episodes."""
        assert isinstance(pruner, AMCEngine)
        super().run_pruner(pruner, model, smash_config)
        smash_config.state.update(macs_ratio=round(pruner.best_macs / pruner.channel_macs.total, 6),
                                  episodes=[{k: h[k] for k in ("episode", "metric", "macs", "reward")}
                                            for h in pruner.history])
