"""Channel units: the coupled channel groups of a model as MMRazor's mutators see them, with live masks.

A *unit* (:class:`~slimkit.engines.pruning.unit.ChannelUnit`) is one group of
:class:`~slimkit.engines.pruning.coupling.ChannelCoupling` (no second dependency analysis), cut where MMRazor cuts
it: the Conv/Linear layers producing its channels (a residual stream has several), the depthwise convs and norms
carrying them, and the layers reading them. Its ``mask`` (one value per channel, 1 = kept) acts on
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
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd

from slimkit.engines.pruning.channel_macs import ChannelMacs
from slimkit.engines.pruning.unit import ChannelUnit, split_by_producers
from slimkit.engines.speedup import ModelSpeedup
from slimkit.engines.speedup.layers import out_dim, out_major
from slimkit.errors import ConfigError, closest

_CHANNEL_DIM1 = (_ConvNd, _BatchNorm, nn.GroupNorm, nn.InstanceNorm2d)


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
