"""dcff: dynamic-coded filter fusion while training (MMRazor's DCFF)."""

from __future__ import annotations

from typing import Any

from torch import nn

from slimkit.algorithms.pruning._units import UnitPruner
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import integer, real
from slimkit.core.registry import register
from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.pruning.dcff import FilterFusion, temperature
from slimkit.training import default_loss


class _Fusing:
    def __init__(self, fusion: FilterFusion, ratio: float, step_freq: int, steps: int) -> None:
        self.fusion, self.ratio, self.step_freq, self.steps, self.iteration = fusion, ratio, step_freq, steps, 0

    def refuse(self) -> None:
        tau = temperature(self.iteration, self.steps)
        for unit in self.fusion.units.units:
            self.fusion.fuse(unit, unit.count_for(self.ratio), tau)


@register
class DCFFPruner(UnitPruner):
    """Dynamic-coded filter fusion (Lin et al., 2021).

    Every coupled group keeps ``ratio`` of its channels, chosen
    every ``step_freq`` steps by a KL-style score of the softmax over filter distances, and each kept filter is a
    softmax-weighted fusion of all of them; the temperature anneals over ``steps``, and the fused convs are what
    the speedup shrinks.
    """

    algorithm_name = "dcff"
    references = {"Paper": "https://arxiv.org/abs/2107.06916",
                  "MMRazor": "https://github.com/open-mmlab/mmrazor/tree/main/configs/pruning/mmcls/dcff"}

    def extra_hyperparameters(self) -> list:
        """Kept ratio and re-fusion frequency."""
        return [
            real("ratio", 0.01, 1.0, 0.5, "Share of each group's channels kept."),
            integer("step_freq", 1, 10**6, 1, "Training steps between two re-fusions."),
        ]

    def setup(self, units: ChannelUnits, smash_config: SmashConfigPrefixWrapper) -> _Fusing:
        """Fused convs at the first temperature."""
        state = _Fusing(FilterFusion(units), float(smash_config["ratio"]), int(smash_config["step_freq"]),
                        int(smash_config["steps"]))
        state.refuse()
        return state

    def batch_loss(self, engine: _Fusing, model: nn.Module, batch: Any) -> Any:
        """Re-fuse on schedule, then the task loss."""
        if engine.iteration % engine.step_freq == 0:
            engine.refuse()
        engine.iteration += 1
        return default_loss(model, batch)

    def finish(self, engine: _Fusing, units: ChannelUnits, smash_config: SmashConfigPrefixWrapper) -> dict:
        """Bake the fused filters and shrink."""
        return engine.fusion.deploy()
