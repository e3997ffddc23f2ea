"""Slimmable networks (Yu et al., ICLR 2019): several widths sharing one set of weights.

``SlimmableWidths(units, subnets)``: ``subnets`` is a list of ``{unit: choice}``; :meth:`SlimmableWidths.switch`
activates one (hard masks keeping each unit's first channels) and gives it its own batch-norm running
statistics (switchable batch norm: the statistics of one width fit no other; the affine parameters are
shared). Training sums the loss of every width on each batch; :meth:`SlimmableWidths.deploy` keeps one width,
with its statistics, and removes the other channels for real.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.errors import ConfigError

_STATS = ("running_mean", "running_var", "num_batches_tracked")


class SlimmableWidths:
    """The widths of a slimmable network and their private batch-norm statistics."""

    def __init__(self, units: ChannelUnits, subnets: Sequence[Mapping[str, float | int]]) -> None:
        if not subnets:
            raise ConfigError("a slimmable network needs at least one subnet (a dict of unit -> choice).")
        self.units = units
        self.subnets = [{units.resolve(name).name: choice for name, choice in s.items()} for s in subnets]
        for subnet in self.subnets:
            for name, choice in subnet.items():
                units.resolve(name).count_for(choice)  # refuses a bad choice now, not mid-training
        self.norms = {n: m for n, m in units.model.named_modules() if isinstance(m, _BatchNorm)
                      and m.track_running_stats}
        self._stats = [self._snapshot() for _ in self.subnets]  # each width's own tensors
        self.active: int | None = None
        units.attach()

    def _snapshot(self) -> dict[str, dict[str, torch.Tensor]]:
        return {n: {k: getattr(m, k).detach().clone() for k in _STATS if getattr(m, k, None) is not None}
                for n, m in self.norms.items()}

    def switch(self, index: int) -> None:
        """Activate subnet ``index``: its widths and its batch-norm statistics (buffers swapped, not copied)."""
        if not -len(self.subnets) <= index < len(self.subnets):
            raise ConfigError(f"subnet index {index} is out of range: there are {len(self.subnets)} subnets.")
        index %= len(self.subnets)
        for name, stats in self._stats[index].items():
            module = self.norms[name]
            for key, value in stats.items():
                module._buffers[key] = value.to(getattr(module, key).device)
                stats[key] = module._buffers[key]
        for name, choice in self.subnets[index].items():
            self.units.choose(self.units.resolve(name), choice, "sequential")
        self.active = index

    def deploy(self, index: int) -> dict[str, Any]:
        """Keep subnet ``index`` only (physically); returns ``kept_channels``."""
        self.switch(index)
        return self.units.deploy()


