"""slimmable_network: train several widths on shared weights, keep one (MMRazor's SlimmableNetwork)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from slimkit.algorithms.pruning._units import UnitPruner
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import ListHyperparameter, real
from slimkit.core.registry import register
from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.pruning.slimmable import SlimmableWidths
from slimkit.errors import ConfigError
from slimkit.training import default_loss


@register
class SlimmableNetworkPruner(UnitPruner):
    """Slimmable networks (Yu et al., ICLR 2019).

    Every coupled group is trained at each of ``widths`` (kept
    shares, written as strings such as ``["1.0", "0.75", "0.5"]``) on the same weights, each width with its own
    batch-norm statistics; the model keeps ``deploy_width`` (one of them) for real.
    """

    algorithm_name = "slimmable_network"
    references = {"Paper": "https://arxiv.org/abs/1812.08928",
                  "MMRazor": "https://github.com/open-mmlab/mmrazor/tree/main/configs/nas/mmcls/autoslim"}

    def extra_hyperparameters(self) -> list:
        """Widths and the one kept."""
        return [
            ListHyperparameter("widths", ("1.0", "0.75", "0.5"),
                               meta={"desc": "Kept shares trained together (strings of numbers in (0, 1])."}),
            real("deploy_width", 0.01, 1.0, 0.5, "The width kept at the end (one of widths)."),
        ]

    def setup(self, units: ChannelUnits, smash_config: SmashConfigPrefixWrapper) -> SlimmableWidths:
        """One subnet per width, every unit at that share."""
        try:
            widths = [float(w) for w in smash_config["widths"]]
        except ValueError as exc:
            raise ConfigError(f"slimmable_network_widths must be numbers in (0, 1] written as strings, got "
                              f"{list(smash_config['widths'])}.") from exc
        deploy = float(smash_config["deploy_width"])
        if not widths or any(not 0 < w <= 1 for w in widths) or not any(abs(w - deploy) < 1e-9 for w in widths):
            raise ConfigError(f"slimmable_network: widths {widths} must be in (0, 1] and include deploy_width "
                              f"{deploy}.")
        return SlimmableWidths(units, [{u.name: w for u in units.units} for w in widths])

    def batch_loss(self, engine: SlimmableWidths, model: nn.Module, batch: Any) -> Any:
        """The sum of every width's task loss."""
        total = torch.zeros(())
        for index in range(len(engine.subnets)):
            engine.switch(index)
            total = total + default_loss(model, batch)
        return total

    def finish(self, engine: SlimmableWidths, units: ChannelUnits, smash_config: SmashConfigPrefixWrapper) -> dict:
        """Keep ``deploy_width``."""
        deploy = float(smash_config["deploy_width"])
        index = next(i for i, s in enumerate(engine.subnets) if abs(next(iter(s.values())) - deploy) < 1e-9)
        return engine.deploy(index)
