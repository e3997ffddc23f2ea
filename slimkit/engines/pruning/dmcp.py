"""DMCP: differentiable Markov channel pruning (Guo et al., CVPR 2020) on slimkit's channel units.

Each unit's channels are ordered and split as ``min_ch`` always-kept channels followed by ``num_groups`` groups of
``group_size`` (from ``pruning_cfg=(min_rate, max_rate, rate_offset)``). Keeping group ``k`` is a Markov
chain: it is kept only if group ``k-1`` is, with probability ``exp(-max(alpha_k, 0))`` (``alpha``: the unit's
learnable architecture parameters). So the marginal probability of group ``k`` is the cumulative product, the
expected width is ``min_ch + group_size * sum_k cumprod_k`` and, multiplied into the channels as a soft mask,
the expected architecture is differentiable in ``alpha``; so is its expected MACs
(:meth:`DMCPSearch.expected_macs`), which a FLOPs loss pulls to the target.

Subnets: ``max``, ``min``, ``random`` (a uniform number of groups), ``direct`` (walk the chain with its
probabilities) set hard masks; ``expected`` the soft one. :meth:`DMCPSearch.export_widths` rounds the expected
widths, the width exported.
"""

from __future__ import annotations

import random

import torch
from torch import nn

from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.pruning.unit import ChannelUnit
from slimkit.errors import ConfigError

MODES = ("max", "min", "random", "direct", "expected")
FLOPS_LOSSES = ("l1", "l2", "log_l1", "inverted_log_l1")


def split_unit(channels: int, min_rate: float, max_rate: float, rate_offset: float) -> tuple[int, int, int]:
    """``(group_size, num_groups, min_ch)`` of a unit of ``channels`` (MMRazor's arithmetic)."""
    group_size = int(rate_offset * channels / max_rate)
    num_groups = int((max_rate - min_rate) / rate_offset + 1e-4) if group_size else 0
    min_ch = channels - group_size * num_groups
    if min_ch <= 0:
        raise ConfigError(f"pruning_cfg {(min_rate, max_rate, rate_offset)} leaves no channel of a unit of "
                          f"{channels}; raise min_rate.")
    return group_size, num_groups, min_ch


class DMCPSearch(nn.Module):
    """Architecture parameters per unit and the subnets they describe (see the module docstring)."""

    def __init__(self, units: ChannelUnits, pruning_cfg: tuple[float, float, float] = (0.1, 1.0, 0.05)) -> None:
        super().__init__()
        self.units = units
        self.layout = {u.name: split_unit(u.num_channels, *pruning_cfg) for u in units.units}
        self.arch_params = nn.ParameterDict({
            _key(u): nn.Parameter(torch.zeros(self.layout[u.name][1])) for u in units.units})
        units.attach()

    def marginal(self, unit: ChannelUnit) -> torch.Tensor:
        """Probability that each group of ``unit`` is kept."""
        alpha = self.arch_params[_key(unit)]
        return torch.cumprod(torch.exp(-alpha.clamp(min=0)), dim=0)

    def expected_width(self, unit: ChannelUnit) -> torch.Tensor:
        """Expected kept channels of ``unit`` (differentiable in its arch parameters)."""
        group_size, _, min_ch = self.layout[unit.name]
        return min_ch + group_size * self.marginal(unit).sum()

    def set_subnet(self, mode: str) -> None:
        """Set every unit's mask for ``mode`` (see :data:`MODES`)."""
        if mode not in MODES:
            raise ConfigError(f"DMCP subnet mode must be one of {', '.join(MODES)}, got {mode!r}.")
        for unit in self.units.units:
            group_size, groups, min_ch = self.layout[unit.name]
            if mode == "expected":
                probs = self.marginal(unit).repeat_interleave(group_size)
                unit.mask = torch.cat([torch.ones(min_ch), probs])
                continue
            if mode == "max":
                n = groups
            elif mode == "min":
                n = 0
            elif mode == "random":
                n = random.randint(0, groups)
            else:
                stay = torch.exp(-self.arch_params[_key(unit)].detach().clamp(min=0)).tolist()
                n = next((k for k, p in enumerate(stay) if random.random() > p), groups)
            unit.keep(range(min_ch + group_size * n))

    def expected_macs(self) -> torch.Tensor:
        """MACs of the expected architecture (:class:`~slimkit.engines.pruning.ChannelMacs`'s model)."""
        macs = self.units.macs
        keep: dict[str, torch.Tensor] = {}
        for unit in self.units.units:
            fraction = self.expected_width(unit) / unit.num_channels
            for layer in (*unit.producers, *unit.depthwise):
                keep[layer] = fraction
        one = torch.ones(())
        total = torch.zeros(())
        for name, full in macs.full.items():
            removed = sum((share * (1 - keep.get(p, one)) for p, share in macs.reads.get(name, ())), torch.zeros(()))
            total = total + full * keep.get(name, one) * (1 - removed).clamp(min=0)
        return total

    def export_widths(self) -> dict[str, int]:
        """The rounded expected width of every unit (what the exported model keeps)."""
        with torch.no_grad():
            return {u.name: max(1, int(round(float(self.expected_width(u))))) for u in self.units.units}


def flops_loss(expected: torch.Tensor, target: float, kind: str = "log_l1") -> torch.Tensor:
    """How far ``expected`` MACs are from ``target`` (same unit), in MMRazor's four forms."""
    error = expected - target
    if kind == "l1":
        return error.abs()
    if kind == "l2":
        return error ** 2
    if kind == "inverted_log_l1":
        return -torch.log(1 / (error + 1e-5))
    if kind == "log_l1":
        ratio = 0.1 if float(error.detach().abs()) > 200 else 1.0
        lower = target * 0.95
        if float(expected.detach()) < lower:
            return torch.log(ratio * error.abs())
        if float(expected.detach()) < target:
            return expected * 0
        return torch.log(ratio * (expected - lower).abs())
    raise ConfigError(f"flops_loss_type must be one of {', '.join(FLOPS_LOSSES)}, got {kind!r}.")


def _key(unit: ChannelUnit) -> str:
    return unit.name.replace(".", "-")



