"""ItePruneAlgorithm: MMRazor's iterative channel pruning (its l1-norm configs) on slimkit's training loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from slimkit.engines.pruning.ite_prune import IterativeSchedule
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.pruning.base import PruningAlgorithm
from slimkit.faces.mmrazor.pruning.mutators import mapping


@register_module()
class ItePruneAlgorithm(PruningAlgorithm):
    """Prune the units named in ``target_pruning_ratio`` (kept ratios or counts) on a schedule while training.

    At training steps ``0, step_freq, ...`` (``prune_times`` of them) every targeted unit moves towards its
    target, linearly or at once (``linear_schedule``) (:class:`~slimkit.engines.pruning.ite_prune.
    IterativeSchedule`); which channels stay follows the mutator's unit type (``L1MutableChannelUnit``: the
    largest L1 norms). ``mutator_cfg`` is MMRazor's spelling of ``mutator``. :meth:`deploy` removes the
    channels for real.
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any], mutator_cfg: Any = None,
                 data_preprocessor: Any = None, target_pruning_ratio: Mapping[str, float | int] | None = None,
                 step_freq: int = 1, prune_times: int = 1, init_cfg: Mapping[str, Any] | None = None,
                 linear_schedule: bool = True, dummy_input: Any = None) -> None:
        super().__init__(architecture, mutator_cfg, data_preprocessor, init_cfg, dummy_input)
        full = self.mutator.choice_template()
        target = {}
        for name, value in (mapping(target_pruning_ratio, "target_pruning_ratio") or full).items():
            unit = self.units.resolve(str(name))
            unit.count_for(self.mutator.check_choice(unit, value))  # a bad target fails now, not mid-training
            target[unit.name] = value
        self.schedule = self.make_schedule(target, full, step_freq, prune_times, linear_schedule)

    def make_schedule(self, target: dict[str, Any], full: dict[str, Any], step_freq: int, prune_times: int,
                      linear_schedule: bool) -> IterativeSchedule:
        """The schedule (DCFF derives its own prune times)."""
        return IterativeSchedule(target, full, step_freq, prune_times, linear_schedule)

    def before_step(self) -> None:
        """At a prune time, set the scheduled widths."""
        if self.schedule.is_prune_time(self.iteration):
            self.apply_choices(self.schedule.prune_at(self.iteration))

    def apply_choices(self, choices: dict[str, Any]) -> None:
        """Set the widths through the mutator."""
        self.mutator.set_choices(choices)
