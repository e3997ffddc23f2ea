"""DCFF: MMRazor's dynamic-coded filter fusion, an iterative pruner whose kept filters are fused."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from slimkit.engines.pruning.dcff import FilterFusion, temperature
from slimkit.engines.pruning.ite_prune import IterativeSchedule
from slimkit.errors import check_int
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.pruning.ite_prune import ItePruneAlgorithm
from slimkit.faces.mmrazor.pruning.mutators import DCFFChannelMutator


@register_module()
class DCFF(ItePruneAlgorithm):
    """Dynamic-coded filter fusion (Lin et al., 2021): widths fixed by ``target_pruning_ratio``, filters fused.

    At every prune time (``step_freq`` steps apart; ``prune_times=0`` means "until ``max_iters``") each unit
    keeps the filters of highest KL-style score at the current temperature, and each kept filter computes as a
    softmax-weighted fusion of all filters (:mod:`slimkit.engines.pruning.dcff`); the temperature falls from 1
    to 1e-4 over ``max_iters`` steps (slimkit's addition: MMRazor reads it from its runner; default 10000, the
    curve is flat after a few steps anyway). :meth:`deploy` bakes the fused filters and removes the rest.
    """

    mutator_class = DCFFChannelMutator
    default_mutator = {"type": "DCFFChannelMutator"}

    def __init__(self, architecture: nn.Module | Mapping[str, Any], mutator_cfg: Any = None,
                 data_preprocessor: Any = None, target_pruning_ratio: Mapping[str, float | int] | None = None,
                 step_freq: int = 1, prune_times: int = 0, init_cfg: Mapping[str, Any] | None = None,
                 linear_schedule: bool = False, max_iters: int = 10000, dummy_input: Any = None) -> None:
        self.max_iters = check_int("DCFF max_iters", max_iters)
        super().__init__(architecture, mutator_cfg, data_preprocessor, target_pruning_ratio, step_freq,
                         prune_times, init_cfg, linear_schedule, dummy_input)
        self.fusion = FilterFusion(self.units)
        self.apply_choices(self.schedule.prune_at(0))

    def make_schedule(self, target: dict[str, Any], full: dict[str, Any], step_freq: int, prune_times: int,
                      linear_schedule: bool) -> IterativeSchedule:
        """One of ``step_freq`` / ``prune_times`` decides the other over ``max_iters`` (MMRazor's rule)."""
        if isinstance(prune_times, int) and not isinstance(prune_times, bool) and prune_times == 0 and isinstance(
                step_freq, int) and not isinstance(step_freq, bool) and step_freq >= 1:
            prune_times = max(1, self.max_iters // step_freq)
        return IterativeSchedule(target, full, step_freq, prune_times, linear_schedule)

    def apply_choices(self, choices: dict[str, Any]) -> None:
        """Re-fuse every targeted unit at the current temperature."""
        tau = temperature(self.iteration, self.max_iters)
        for name, choice in choices.items():
            unit = self.units.resolve(name)
            self.fusion.fuse(unit, unit.count_for(self.mutator.check_choice(unit, choice)), tau)

    def finish(self) -> dict[str, Any]:
        """Bake the fused filters, then remove the pruned channels."""
        return self.fusion.deploy()
