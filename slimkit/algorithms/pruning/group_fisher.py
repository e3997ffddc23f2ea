"""group_fisher: Group Fisher channel pruning (MMRazor's GroupFisherAlgorithm) while training on cfg.data."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ConfigSpace import CategoricalHyperparameter, UniformFloatHyperparameter, UniformIntegerHyperparameter
from torch import nn

from slimkit.algorithms.pruning._data import train_loader
from slimkit.algorithms.pruning._selection import round_to_hyperparameter
from slimkit.algorithms.pruning._units import UnitPruner
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.pruning.group_fisher import NORMALIZATIONS, GroupFisherPruner
from slimkit.training import default_loss, fit, make_optimizer


class _UntilDone:
    """The train batches, cycled, until the pruner reaches its target (one long epoch for the loop)."""

    def __init__(self, loader: Any, pruner: GroupFisherPruner) -> None:
        self.loader, self.pruner = loader, pruner

    def __iter__(self) -> Iterator[Any]:
        while not self.pruner.done():
            for batch in self.loader:
                yield batch
                if self.pruner.done():
                    return


@register
class GroupFisher(UnitPruner):
    """Group Fisher pruning (Liu et al., ICML 2021): one coupled channel group's channel at a time, while training.

    Each step adds, per channel of every coupled group, the squared activation x gradient at the inputs of the
    layers reading it (its Fisher information), divided by the MACs (``normalization_type="flops"``) or memory
    (``"act"``) one channel costs; every ``interval`` steps the least important channel goes. Pruning stops when
    the estimated MACs reach ``target_macs_ratio`` of the model's (or after ``steps``); ``finetune_steps`` more
    steps then train the pruned network, and the speedup removes the channels for real.
    """

    algorithm_name = "group_fisher"
    references = {"Paper": "https://arxiv.org/abs/2108.00708",
                  "MMRazor": "https://github.com/open-mmlab/mmrazor/tree/main/configs/pruning/mmcls/group_fisher"}
    default_steps = 2000

    def extra_hyperparameters(self) -> list:
        """Interval, normalisation, target, linear layers, fine-tuning."""
        return [
            UniformIntegerHyperparameter("interval", 1, 100000, default_value=10,
                                         meta={"desc": "Training steps between two pruned channels."}),
            CategoricalHyperparameter("normalization_type", list(NORMALIZATIONS), default_value="flops",
                                      meta={"desc": "Divide the Fisher information by the MACs ('flops') or the "
                                                    "activation memory ('act') of a channel, or not ('none')."}),
            UniformFloatHyperparameter("target_macs_ratio", 0.01, 1.0, default_value=0.5,
                                       meta={"desc": "Pruning stops when the MACs fall to this share."}),
            Boolean("mutate_linear", True, meta={"desc": "Also prune groups read by Linear layers (MMRazor's "
                                                         "default is False)."}),
            UniformIntegerHyperparameter("channels_per_prune", 1, 100000, default_value=1,
                                         meta={"desc": "Channels removed at each pruning (1: MMRazor's rule; more "
                                                       "reach the target in fewer steps)."}),
            UniformIntegerHyperparameter("finetune_steps", 0, 10**7, default_value=0,
                                         meta={"desc": "Training steps after the target is reached."}),
            round_to_hyperparameter(),
        ]

    def setup(self, units: ChannelUnits, smash_config: SmashConfigPrefixWrapper) -> GroupFisherPruner:
        """The pruner over ``units``."""
        return GroupFisherPruner(units, int(smash_config["interval"]), smash_config["normalization_type"],
                                 float(smash_config["target_macs_ratio"]), int(smash_config["channels_per_prune"]),
                                 int(smash_config["round_to"]))

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        self.mutate_linear = bool(smash_config["mutate_linear"])
        return super()._apply(model, smash_config)

    def train(self, engine: GroupFisherPruner, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> None:
        """Prune while training until the target (at most ``steps``), then fine-tune ``finetune_steps``."""
        name = self.algorithm_name
        optimizer = make_optimizer(smash_config["optimizer"], model.parameters(), lr=float(smash_config["lr"]))

        def loss(m: nn.Module, batch: Any) -> Any:
            value = default_loss(m, batch)
            engine.arm()
            return value

        seed = int(smash_config["seed"])
        result = fit(model, _UntilDone(train_loader(name, smash_config), engine), optimizer=optimizer, loss=loss,
                     epochs=1, steps=int(smash_config["steps"]), seed=seed, desc=name)
        engine.end_record()
        engine.round_units()  # before fine-tuning, which then trains the widths that stay
        smash_config.state.update(prune_steps=result.steps, pruned=len(engine.history),
                                  reached_target=engine.done(), macs_ratio=round(engine.units.macs_ratio(), 4))
        if int(smash_config["finetune_steps"]):
            fit(model, train_loader(name, smash_config), optimizer=optimizer, steps=int(smash_config["finetune_steps"]),
                seed=seed, desc=f"{name} fine-tune")

    def finish(self, engine: GroupFisherPruner, units: ChannelUnits, smash_config: SmashConfigPrefixWrapper) -> dict:
        """Remove the pruned channels."""
        return engine.deploy()
