"""Channel units: the coupled channel groups of a model as MMRazor's mutators see them, with live masks.

A *unit* is one group of :class:`~slimkit.engines.pruning.coupling.ChannelCoupling` (no second dependency
analysis): the Conv/Linear layers producing its channels (a residual stream has several), the depthwise convs
and norms carrying them, and the layers reading them. Its ``mask`` (one value per channel, 1 = kept) acts on
the model while it trains: a forward hook multiplies the output of the unit's norms (or, without norms, of its
producers and depthwise convs) by it, so a masked channel reads as zero downstream, as if removed. Soft
values (DMCP's expected widths) pass gradients to whatever computed them.

:meth:`ChannelUnits.deploy` makes the masks physical: the pruned rows of producers, depthwise convs and norms
are zeroed (the masked model and the zeroed model compute the same), then
:class:`~slimkit.engines.speedup.ModelSpeedup` removes them; ``kept_channels`` is the replay record.

Unit names follow MMRazor's ``"<first producer>_(0, C)_C"`` so its ``target_pruning_ratio`` dicts apply to a
model with the same module names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd

from slimkit.engines.pruning.channel_macs import ChannelMacs
from slimkit.engines.speedup import ModelSpeedup
from slimkit.engines.speedup.layers import out_dim, out_major
from slimkit.errors import ConfigError, closest

_CHANNEL_DIM1 = (_ConvNd, _BatchNorm, nn.GroupNorm, nn.InstanceNorm2d)


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


def _order_classes(names: list[str], table: Mapping[str, np.ndarray]) -> np.ndarray:
    """The class roots of a group in the order the first producer's channels give (then the others')."""
    seen: dict[int, None] = {}
    for name in names:
        for c in table[name].tolist():
            if c >= 0:
                seen.setdefault(int(c), None)
    return np.asarray(list(seen), dtype=np.int64)


def _index(classes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Unit channel of each row (-1 where the row's class is not one of ``classes``)."""
    where = {int(c): i for i, c in enumerate(classes.tolist())}
    return np.asarray([where.get(int(r), -1) for r in rows.tolist()], dtype=np.int64)


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


class ChannelUnits:
    """The prunable channel units of ``model`` on ``dummy_input`` and the hooks that apply their masks.

    ``mutate_linear=False`` leaves out units read by a Linear layer (GroupFisher's default); ``exclude``: layer
    names whose units are left out. Units with one channel are left out (nothing could go).
    """

    def __init__(self, model: nn.Module, dummy_input: Any, *, mutate_linear: bool = True,
                 exclude: Iterable[str] = ()) -> None:
        self.model = model
        self.dummy_input = dummy_input
        self.macs = ChannelMacs(model, dummy_input)
        coupling = self.macs.coupling
        self.modules = dict(model.named_modules())
        excluded = set(exclude)
        unknown = sorted(excluded - set(self.modules))
        if unknown:
            raise ConfigError(f"exclude names {unknown[0]!r}, which is not a layer of the model."
                              f"{closest(unknown[0], list(self.modules))}")
        shrinkable = coupling.shrinkable(coupling.prunable, dims=("mlp", "hidden"))
        self.units: list[ChannelUnit] = []
        done: set[int] = set()
        for name in coupling.producers:
            if name not in shrinkable:
                continue
            for group in coupling.groups.get(name, ()):
                if group in done:
                    continue
                done.add(group)
                unit = self._unit(coupling, group)
                for part in [] if unit is None else split_by_producers(unit):
                    if excluded.intersection(part.layers()):
                        continue
                    if not mutate_linear and any(isinstance(self.modules[r], nn.Linear) for r in part.readers):
                        continue
                    self.units.append(part)
        self._handles: list[Any] = []
        self._gates: dict[str, list[tuple[ChannelUnit, torch.Tensor, torch.Tensor]]] = {}
        for unit in self.units:
            table = unit.norms or {**unit.producers, **unit.depthwise}
            for layer, idx in table.items():
                pos = np.flatnonzero(idx >= 0)
                self._gates.setdefault(layer, []).append(
                    (unit, torch.from_numpy(pos), torch.from_numpy(idx[pos])))

    def _unit(self, coupling: Any, group: int) -> ChannelUnit | None:
        producers, depthwise, norms = coupling.members(group)
        if not producers or not all(p in coupling.prunable for p in producers):
            return None
        classes = _order_classes(producers, coupling.producers)
        if len(classes) < 2:
            return None
        unit = ChannelUnit(f"{producers[0]}_(0, {len(classes)})_{len(classes)}", len(classes),
                           {p: _index(classes, coupling.producers[p]) for p in producers},
                           {d: _index(classes, coupling.depthwise[d]) for d in depthwise},
                           {n: _index(classes, coupling.norms[n]) for n in norms})
        for producer in producers:
            for reader, _, channels, positions in coupling.consumers(producer):
                idx = unit.producers[producer][channels]
                old = unit.readers.get(reader)
                pos = positions if old is None else np.concatenate([old[0], positions])
                ids = idx if old is None else np.concatenate([old[1], idx])
                unit.readers[reader] = (pos, ids)
        for name, idx in unit.depthwise.items():
            unit.readers.setdefault(name, (np.arange(len(idx)), idx))
        for reader, (pos, ids) in list(unit.readers.items()):
            keep = ids >= 0
            pos, ids = pos[keep], ids[keep]
            _, first = np.unique(pos, return_index=True)
            unit.readers[reader] = (pos[first], ids[first])
        return unit

    # --- names ----------------------------------------------------------------------------------------------
    def by_name(self) -> dict[str, ChannelUnit]:
        """Units by name."""
        return {u.name: u for u in self.units}

    def resolve(self, name: str) -> ChannelUnit:
        """The unit called ``name`` (MMRazor's unit name, or the name of any layer in it)."""
        table = self.by_name()
        if name in table:
            return table[name]
        for unit in self.units:
            if name in unit.layers():
                return unit
        raise ConfigError(f"no channel unit {name!r} in this model.{closest(name, list(table))} Units: "
                          f"{', '.join(table) or 'none'}.")

    # --- hooks ----------------------------------------------------------------------------------------------
    def attach(self) -> None:
        """Install the mask hooks (idempotent)."""
        if self._handles:
            return
        for layer, gates in self._gates.items():
            self._handles.append(self.modules[layer].register_forward_hook(self._gate_hook(gates)))

    def detach(self) -> None:
        """Remove the mask hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @staticmethod
    def _gate_hook(gates: list[tuple[ChannelUnit, torch.Tensor, torch.Tensor]]) -> Any:
        def hook(module: nn.Module, args: tuple, output: Any) -> Any:
            if not isinstance(output, torch.Tensor):
                return output
            dim = 1 if isinstance(module, _CHANNEL_DIM1) else output.dim() - 1
            scale = torch.ones(output.shape[dim], dtype=output.dtype, device=output.device)
            for unit, pos, idx in gates:
                if bool((unit.mask.detach() != 1).any()):
                    scale = scale.index_put((pos.to(output.device),), unit.mask.to(output)[idx.to(output.device)])
            shape = [1] * output.dim()
            shape[dim] = -1
            return output * scale.view(shape)

        return hook

    # --- measures -------------------------------------------------------------------------------------------
    def keep_fractions(self) -> dict[str, float]:
        """Fraction of output channels each producer / depthwise conv keeps under the current hard masks."""
        out: dict[str, float] = {}
        for unit in self.units:
            kept = (unit.mask.detach() != 0).numpy()
            for layer, idx in {**unit.producers, **unit.depthwise}.items():
                inside = idx >= 0
                removed = int((~kept[idx[inside]]).sum())
                out[layer] = 1.0 - removed / len(idx)
        return out

    def macs_ratio(self) -> float:
        """Estimated MACs under the current masks over the model's MACs (:class:`ChannelMacs`)."""
        return self.macs.macs(self.keep_fractions()) / max(self.macs.total, 1)

    @torch.no_grad()
    def l1_scores(self, unit: ChannelUnit) -> torch.Tensor:
        """L1 norm of each unit channel's filters, summed over the unit's producers (MMRazor's L1 unit)."""
        score = torch.zeros(unit.num_channels, dtype=torch.float64)
        for layer, idx in unit.producers.items():
            weight = out_major(self.modules[layer], self.modules[layer].weight.detach())
            rows = weight.reshape(weight.shape[0], -1).abs().sum(1).double().cpu()
            inside = np.flatnonzero(idx >= 0)
            score.index_add_(0, torch.from_numpy(idx[inside]), rows[torch.from_numpy(inside)])
        return score

    def choose(self, unit: ChannelUnit, choice: float | int, criterion: str = "l1") -> None:
        """Keep ``choice`` channels of ``unit`` (a ratio or a number): the largest L1 norms or the first ones."""
        count = unit.count_for(choice)
        if criterion == "l1":
            unit.keep(torch.argsort(self.l1_scores(unit), descending=True, stable=True)[:count].tolist())
        elif criterion == "sequential":
            unit.keep(range(count))
        else:
            raise ConfigError(f"channel criterion must be 'l1' or 'sequential', got {criterion!r}.")

    def current_choices(self) -> dict[str, int]:
        """Kept channels per unit."""
        return {u.name: u.activated_channels for u in self.units}

    # --- deploy ---------------------------------------------------------------------------------------------
    @torch.no_grad()
    def deploy(self) -> dict[str, Any]:
        """Remove the hooks, zero the pruned rows and physically remove them; returns ``kept_channels``."""
        self.detach()
        dropped_rows: dict[str, np.ndarray] = {}  # a layer in several units drops the rows each unit drops
        for unit in self.units:
            dropped = (unit.mask.detach() == 0).numpy()
            if not dropped.any():
                continue
            for table in (unit.producers, unit.depthwise, unit.norms):
                for layer, idx in table.items():
                    rows = torch.from_numpy(np.flatnonzero((idx >= 0) & dropped[np.maximum(idx, 0)]))
                    module = self.modules[layer]
                    for pname, dim in (("weight", out_dim(module)), ("bias", 0)):
                        param = getattr(module, pname, None)
                        if isinstance(param, torch.Tensor):
                            param.index_fill_(dim, rows.to(param.device), 0.0)
            for layer, idx in unit.producers.items():
                rows = dropped_rows.setdefault(layer, np.zeros(len(idx), dtype=bool))
                rows |= (idx >= 0) & dropped[np.maximum(idx, 0)]
        masks = {layer: {"out_channels": torch.from_numpy(np.flatnonzero(~rows))}
                 for layer, rows in dropped_rows.items()}
        if not masks:
            return {}
        speedup = ModelSpeedup(self.model, self.dummy_input, masks)
        speedup.speedup_model()
        return dict(speedup.kept_channels or {})
