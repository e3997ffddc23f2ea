"""One channel unit: a group of coupled channels, the layers around it, its mask, and where MMRazor cuts groups.

A unit of :class:`~slimkit.engines.pruning.channel_units.ChannelUnits` maps each layer's channels to the unit's
channels; :func:`split_by_producers` cuts a coupled group into the units MMRazor's channel analyzer makes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from slimkit.errors import ConfigError


@dataclass
class ChannelUnit:
    """One group of coupled channels and the layers around it.

    ``producers`` / ``depthwise`` / ``norms``: layer -> unit channel of each of its channels (-1: not in the
    unit); ``readers``: Conv/Linear layers (and depthwise convs) reading the channels -> (input positions, unit
    channel of each position). ``mask``: float tensor of ``num_channels`` values (1 kept, 0 pruned).
    """

    name: str
    num_channels: int
    producers: dict[str, np.ndarray]
    depthwise: dict[str, np.ndarray] = field(default_factory=dict)
    norms: dict[str, np.ndarray] = field(default_factory=dict)
    readers: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    mask: torch.Tensor = field(default_factory=lambda: torch.ones(0))

    def __post_init__(self) -> None:
        if self.mask.numel() != self.num_channels:
            self.mask = torch.ones(self.num_channels)

    @property
    def activated_channels(self) -> int:
        """Channels whose mask is not zero."""
        return int((self.mask.detach() != 0).sum())

    def keep(self, kept: Iterable[int]) -> None:
        """Hard mask keeping the unit channels ``kept`` (at least one)."""
        index = torch.as_tensor(sorted({int(i) for i in kept}), dtype=torch.long)
        if index.numel() == 0:
            raise ConfigError(f"unit {self.name}: at least one channel must be kept.")
        mask = torch.zeros(self.num_channels)
        mask[index] = 1.0
        self.mask = mask

    def count_for(self, choice: float | int) -> int:
        """Channels a choice keeps: a ratio in (0, 1] of ``num_channels`` or a number (MMRazor's two modes)."""
        if isinstance(choice, bool) or not isinstance(choice, (int, float)) or choice <= 0:
            raise ConfigError(f"unit {self.name}: a choice must be a kept ratio in (0, 1] or a channel count >= 1, "
                              f"got {choice!r}.")
        if isinstance(choice, float) and choice <= 1.0:
            return max(1, min(self.num_channels, int(choice * self.num_channels + 0.5)))
        if int(choice) != choice or choice > self.num_channels:
            raise ConfigError(f"unit {self.name} has {self.num_channels} channels; cannot keep {choice!r}.")
        return int(choice)

    def layers(self) -> list[str]:
        """Every layer whose channels belong to the unit."""
        return [*self.producers, *self.depthwise, *self.norms]



def _restrict(table: Mapping[str, np.ndarray], remap: np.ndarray) -> dict[str, np.ndarray]:
    """``table`` with unit channels renumbered by ``remap`` (-1: left out); layers left with none are dropped."""
    out = {}
    for layer, idx in table.items():
        new = np.where(idx >= 0, remap[np.maximum(idx, 0)], -1)
        if (new >= 0).any():
            out[layer] = new
    return out


def split_by_producers(unit: ChannelUnit) -> list[ChannelUnit]:
    """``unit`` cut where MMRazor cuts it: channels produced by different sets of layers are separate units.

    A group joins the inputs of a concat when one layer produces channels of several of them (a channel
    attention's ``fc`` gating the concat); each input keeps its own unit, named after its first producer and
    that producer's rows, and the shared layer takes part in each for its rows.
    """
    owners: dict[int, list[str]] = {}
    for layer, idx in unit.producers.items():
        for channel in np.unique(idx[idx >= 0]).tolist():
            owners.setdefault(int(channel), []).append(layer)
    signatures: dict[tuple[str, ...], list[int]] = {}
    for channel in range(unit.num_channels):
        signatures.setdefault(tuple(owners.get(channel, ())), []).append(channel)
    if len(signatures) == 1:
        return [unit]
    parts = []
    for layers, channels in signatures.items():
        remap = np.full(unit.num_channels, -1, dtype=np.int64)
        remap[channels] = np.arange(len(channels))
        producers = _restrict(unit.producers, remap)
        rows = np.flatnonzero(producers[layers[0]] >= 0) if layers else np.arange(len(channels))
        readers = {}
        for reader, (pos, ids) in unit.readers.items():
            new = remap[ids]
            if (new >= 0).any():
                readers[reader] = (pos[new >= 0], new[new >= 0])
        name = f"{layers[0] if layers else unit.name}_({int(rows[0])}, {int(rows[-1]) + 1})_{len(channels)}"
        parts.append(ChannelUnit(name, len(channels), producers, _restrict(unit.depthwise, remap),
                                 _restrict(unit.norms, remap), readers))
    return parts
