"""dmcp: differentiable Markov channel pruning while training (MMRazor's DMCP)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from slimkit.algorithms.pruning._units import UnitPruner
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import real
from slimkit.core.registry import register
from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.pruning.dmcp import DMCPSearch, flops_loss
from slimkit.training import default_loss


class _Search:
    def __init__(self, search: DMCPSearch, target: float, arch_start: int, weight: float) -> None:
        self.search, self.target, self.arch_start, self.weight, self.iteration = search, target, arch_start, weight, 0


@register
class DMCPPruner(UnitPruner):
    """Differentiable Markov channel pruning (Guo et al., CVPR 2020).

    Each coupled group's width is a Markov chain
    of channel blocks with learnable keep probabilities. Each step trains the widest, the narrowest and a sampled
    width (random, then walked from the chain after ``arch_start_ratio`` of the steps); from then on the chain's
    parameters also learn from the widest net under the expected soft masks plus a FLOPs loss pulling the expected
    MACs to ``target_macs_ratio``. The exported model keeps each group's rounded expected width.
    """

    algorithm_name = "dmcp"
    references = {"Paper": "https://arxiv.org/abs/2005.03354",
                  "MMRazor": "https://github.com/open-mmlab/mmrazor/tree/main/configs/pruning/mmcls/dmcp"}

    def extra_hyperparameters(self) -> list:
        """Target, search-space split and the architecture schedule."""
        return [
            real("target_macs_ratio", 0.05, 1.0, 0.5, "Expected MACs the architecture parameters are pulled to."),
            real("min_rate", 0.01, 0.99, 0.1, "Smallest share of a group's channels (pruning_cfg's first)."),
            real("rate_offset", 0.01, 1.0, 0.05, "Block size as a share of a group (pruning_cfg's third entry)."),
            real("arch_start_ratio", 0.0, 1.0, 0.5, "Share of the steps before the architecture trains."),
            real("flop_loss_weight", 0.0, 100.0, 1.0, "Weight of the FLOPs loss."),
        ]

    def setup(self, units: ChannelUnits, smash_config: SmashConfigPrefixWrapper) -> _Search:
        """Arch parameters per unit (registered on the model so the optimizer trains them)."""
        search = DMCPSearch(units, (float(smash_config["min_rate"]), 1.0, float(smash_config["rate_offset"])))
        units.model.add_module("dmcp_search", search)
        target = float(smash_config["target_macs_ratio"]) * units.macs.total / 1e6
        start = int(float(smash_config["arch_start_ratio"]) * int(smash_config["steps"]))
        return _Search(search, target, start, float(smash_config["flop_loss_weight"]))

    def batch_loss(self, engine: _Search, model: nn.Module, batch: Any) -> Any:
        """Sandwich losses; after ``arch_start`` the architecture step's losses too (arch parameters only)."""
        engine.iteration += 1
        arch = engine.iteration > engine.arch_start
        total = torch.zeros(())
        for mode in ("max", "min", "direct" if arch else "random"):
            engine.search.set_subnet(mode)
            total = total + default_loss(model, batch)
        if arch:
            params = list(engine.search.arch_params.values())
            engine.search.set_subnet("expected")
            soft = default_loss(model, batch)
            grads = torch.autograd.grad(soft, params, allow_unused=True)
            total = total + sum((p * g.detach()).sum() for p, g in zip(params, grads, strict=True) if g is not None)
            total = total + engine.weight * flops_loss(engine.search.expected_macs() / 1e6, engine.target)
        engine.search.set_subnet("max")
        return total

    def finish(self, engine: _Search, units: ChannelUnits, smash_config: SmashConfigPrefixWrapper) -> dict:
        """Keep the rounded expected widths, drop the arch parameters, shrink."""
        for name, width in engine.search.export_widths().items():
            units.choose(units.resolve(name), width, "sequential")
        del units.model.dmcp_search
        return units.deploy()
