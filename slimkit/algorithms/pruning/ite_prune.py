"""ite_prune: iterative channel pruning on a schedule while training (MMRazor's ItePruneAlgorithm)."""

from __future__ import annotations

from typing import Any

from torch import nn

from slimkit.algorithms.pruning._units import UnitPruner
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import choice, integer, real
from slimkit.core.registry import register
from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.pruning.ite_prune import IterativeSchedule
from slimkit.training import default_loss


class _Scheduled:
    """The schedule, the units and a step counter."""

    def __init__(self, units: ChannelUnits, schedule: IterativeSchedule, criterion: str) -> None:
        self.units, self.schedule, self.criterion, self.iteration = units, schedule, criterion, 0
        units.attach()


@register
class ItePrune(UnitPruner):
    """Iterative channel pruning on a schedule (MMRazor's ItePruneAlgorithm).

    Every coupled channel group shrinks to ``ratio`` of its channels in ``prune_times`` steps, ``step_freq``
    training steps apart (linearly, or at once with ``linear_schedule=False``), keeping the largest L1 norms
    (``criterion="l1"``) or the first channels; training continues in between and after.
    """

    algorithm_name = "ite_prune"
    references = {"MMRazor": "https://github.com/open-mmlab/mmrazor/tree/main/configs/pruning/mmcls/l1-norm"}

    def extra_hyperparameters(self) -> list:
        """Kept ratio, schedule, criterion."""
        return [
            real("ratio", 0.01, 1.0, 0.5, "Share of each group's channels kept at the end."),
            integer("prune_times", 1, 100000, 2, "How many times the widths shrink."),
            integer("step_freq", 1, 10**6, 10, "Training steps between two prune times."),
            choice("linear_schedule", [True, False], True, "Shrink linearly towards ratio (True) or straight to it."),
            choice("criterion", ["l1", "sequential"], "l1", "Keep the channels of largest L1 norm, or the first ones."),
        ]

    def setup(self, units: ChannelUnits, smash_config: SmashConfigPrefixWrapper) -> _Scheduled:
        """The schedule from full width to ``ratio`` for every unit."""
        full = {u.name: 1.0 for u in units.units}
        target = {u.name: float(smash_config["ratio"]) for u in units.units}
        return _Scheduled(units, IterativeSchedule(target, full, int(smash_config["step_freq"]),
                                                   int(smash_config["prune_times"]),
                                                   bool(smash_config["linear_schedule"])), smash_config["criterion"])

    def batch_loss(self, engine: _Scheduled, model: nn.Module, batch: Any) -> Any:
        """At a prune time set the scheduled widths, then the task loss."""
        if engine.schedule.is_prune_time(engine.iteration):
            for name, width in engine.schedule.prune_at(engine.iteration).items():
                engine.units.choose(engine.units.resolve(name), width, engine.criterion)
        engine.iteration += 1
        return default_loss(model, batch)

    def finish(self, engine: _Scheduled, units: ChannelUnits, smash_config: SmashConfigPrefixWrapper) -> dict:
        """Reach the final widths even when ``steps`` ended before the last prune time, then shrink."""
        for name, width in engine.schedule.target.items():
            units.choose(units.resolve(name), width, engine.criterion)
        return units.deploy()
