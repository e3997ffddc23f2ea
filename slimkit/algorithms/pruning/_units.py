"""Shared adapter of the smash pruners that train on channel units.

They are group_fisher, ite_prune, dcff, dmcp and slimmable_network.

``_apply``: trace the model once on the example inputs (or the first train batch) into
:class:`~slimkit.engines.pruning.channel_units.ChannelUnits` (the dependency graph's coupled channel groups;
``exclude`` names layers whose groups stay whole), let the algorithm set up its engine, train ``steps`` optimizer
steps on ``cfg.data`` with slimkit's loop (the algorithm's batch loss), then make the pruning physical through the
speedup and record ``kept_channels``, which ``replay()`` applies to a fresh base model before the weights load.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from slimkit.algorithms.pruning._data import train_loader
from slimkit.algorithms.pruning._framework import LAYER_TYPES
from slimkit.algorithms.pruning._search import training_hyperparameters
from slimkit.algorithms.pruning._selection import resolve_dummy_input
from slimkit.core.contract import SaveFn, SlimkitPruner, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import ListHyperparameter, integer
from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.speedup import apply_kept_channels
from slimkit.errors import ConfigError
from slimkit.training import default_loss, fit, make_optimizer


class UnitPruner(SlimkitPruner):
    """Base of the channel-unit smash pruners (not registered); subclasses implement :meth:`setup`."""

    dataset_required = True
    save_fn = SaveFn.REPLAY
    default_steps: int = 100
    mutate_linear: bool = True

    def get_hyperparameters(self) -> list:
        """``steps``, ``exclude``, the algorithm's own, then the training settings."""
        return [
            integer("steps", 1, 10**7, self.default_steps, "Optimizer steps of training on the added data while "
                    "pruning."),
            ListHyperparameter("exclude", (), meta={"desc": "Layer names whose channel groups are never pruned."}),
            *self.extra_hyperparameters(),
            *training_hyperparameters(lr=1e-3),
        ]

    def extra_hyperparameters(self) -> list:
        """The algorithm's own hyperparameters."""
        return []

    def model_check_fn(self, model: Any) -> bool:
        """Needs Conv/Linear layers."""
        return isinstance(model, nn.Module) and any(isinstance(m, LAYER_TYPES) for m in model.modules())

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return "It prunes the channels of Conv/Linear layers and the model has none."

    def setup(self, units: ChannelUnits, smash_config: SmashConfigPrefixWrapper) -> Any:
        """Build the engine on ``units``; return the state object :meth:`batch_loss` and :meth:`finish` use."""
        raise NotImplementedError

    def batch_loss(self, engine: Any, model: nn.Module, batch: Any) -> Any:
        """The training loss of one batch (the task loss by default)."""
        return default_loss(model, batch)

    def finish(self, engine: Any, units: ChannelUnits, smash_config: SmashConfigPrefixWrapper) -> dict[str, Any]:
        """Make the pruning physical; returns ``kept_channels``."""
        return units.deploy()

    def train(self, engine: Any, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> None:
        """``steps`` optimizer steps of :meth:`batch_loss` on the train data."""
        optimizer = make_optimizer(smash_config["optimizer"], model.parameters(), lr=float(smash_config["lr"]))
        result = fit(model, train_loader(self.algorithm_name, smash_config), optimizer=optimizer,
                     loss=lambda m, b: self.batch_loss(engine, m, b), steps=int(smash_config["steps"]),
                     seed=int(smash_config["seed"]), desc=self.algorithm_name)
        smash_config.state.update(train_steps=result.steps, final_loss=round(result.final_loss, 6))

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        dummy = resolve_dummy_input(self.algorithm_name, model, smash_config)
        units = ChannelUnits(model, dummy, mutate_linear=self.mutate_linear, exclude=smash_config["exclude"])
        if not units.units:
            raise ConfigError(f"{self.algorithm_name}: no channel group of this model can be pruned (each one feeds "
                              "the output, is excluded, or cannot be shrunk by the speedup).")
        engine = self.setup(units, smash_config)
        self.train(engine, model, smash_config)
        kept = self.finish(engine, units, smash_config)
        smash_config.state.update(kept_channels=kept, units={u.name: [u.activated_channels, u.num_channels]
                                                               for u in units.units})
        return model

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Shrink a freshly built base model to the recorded kept channels."""
        kept = state.get("kept_channels") or {}
        return apply_kept_channels(model, kept) if kept else model
