"""Group Fisher pruning (Liu et al., ICML 2021): prune one coupled channel group at a time while training.

Each channel unit (:class:`~slimkit.engines.pruning.channel_units.ChannelUnits`: a group of coupled
channels) gets a virtual mask ``m`` on the inputs of the layers that read it. The gradient of the loss with
respect to ``m_c`` for one sample is ``sum over readers and positions of x_c * dL/dx_c`` (activation times
its gradient); its square, summed over the batch, estimates the Fisher information of removing channel ``c``
(coupled channels sum their readers before squaring, which is what "group" means). The importance is that
Fisher information accumulated over the steps since the last pruning, divided by what removing the channel
saves: ``normalization_type="flops"`` (MACs of the unit's producers for one output channel plus its readers'
MACs for one input channel, at the current widths, in GMACs), ``"act"`` (activation memory of one channel of
the unit's producers, in M elements) or ``"none"``.

:meth:`GroupFisherPruner.arm` after a forward makes :meth:`GroupFisherPruner.step` run when its backward pass
has the gradients; every ``interval`` steps the channel with the smallest importance over all units (a unit
keeps at least one channel) is masked and the Fisher information restarts (``channels_per_prune > 1``,
slimkit's addition for short budgets, masks that many in turn). ``target_macs_ratio`` stops pruning once the
estimated MACs of the masked model fall to that share of the original. With ``round_to`` (Torch-Pruning's),
:meth:`GroupFisherPruner.round_units` then moves every unit's kept count to the nearest multiple of it
(:func:`~slimkit.engines.pruning.maskers.round_kept`). :meth:`GroupFisherPruner.deploy` removes the pruned
channels for real.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.conv import _ConvNd

from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.pruning.maskers import check_round_to, lowest_indices, round_kept
from slimkit.engines.pruning.unit import ChannelUnit
from slimkit.engines.speedup.layers import DECONV_TYPES
from slimkit.errors import ConfigError, check_int, check_number
from slimkit.utils import run_model

NORMALIZATIONS = ("flops", "act", "none")


class GroupFisherPruner:
    """Fisher-information channel pruning over ``units``, one channel every ``interval`` steps."""

    def __init__(self, units: ChannelUnits, interval: int = 10, normalization_type: str = "flops",
                 target_macs_ratio: float | None = None, channels_per_prune: int = 1, round_to: int = 1) -> None:
        if not isinstance(normalization_type, str) or normalization_type not in NORMALIZATIONS:
            raise ConfigError(f"normalization_type must be one of {', '.join(NORMALIZATIONS)}, got "
                              f"{normalization_type!r}.")
        check_int("interval", interval, meaning="steps between two pruned channels")
        self.channels_per_prune = check_int("channels_per_prune", channels_per_prune)
        self.round_to = check_round_to(round_to)
        if target_macs_ratio is not None:
            check_number("target ratio", target_macs_ratio, 0, 1, open_low=True)
        if not units.units:
            raise ConfigError("no prunable channel unit in this model (every coupled group is pinned to the output, "
                              "excluded, or read by a Linear layer while mutate_linear=False).")
        self.units, self.interval, self.normalization = units, interval, normalization_type
        self.target = None if target_macs_ratio is None else float(target_macs_ratio)
        self.iteration = 0
        #: the pruned channels in order: (unit name, unit channel, importance)
        self.history: list[tuple[str, int, float]] = []
        self.fisher = {u.name: torch.zeros(u.num_channels, dtype=torch.float64) for u in units.units}
        self._inputs: dict[str, list[torch.Tensor]] = {}  # this forward's, waiting for arm()
        self._recorded: dict[str, list[torch.Tensor]] = {}
        self._grads: dict[str, list[torch.Tensor]] = {}
        self._handles: list[Any] = []
        self._spatial = self._output_sizes()
        self._reads: dict[str, list[tuple[ChannelUnit, np.ndarray]]] = {}
        for unit in units.units:
            for reader, (_, ids) in unit.readers.items():
                self._reads.setdefault(reader, []).append((unit, ids))
        units.attach()
        self.start_record()

    def _output_sizes(self) -> dict[str, int]:
        """Positions per channel of every layer of the units: H*W for convs, 1 for Linear.

        A transposed conv's MACs go by its input positions, so it counts those.
        """
        sizes: dict[str, int] = {}
        wanted = {n for u in self.units.units for n in (*u.producers, *u.depthwise, *u.readers)}
        handles = [self.units.modules[n].register_forward_hook(self._size_hook(n, sizes)) for n in wanted]
        try:
            with torch.no_grad():
                self._trace()
        finally:
            for handle in handles:
                handle.remove()
        return sizes

    def _trace(self) -> None:
        model = self.units.model
        was = model.training
        model.eval()
        try:
            run_model(model, self.units.dummy_input)
        finally:
            model.train(was)

    @staticmethod
    def _size_hook(name: str, sizes: dict[str, int]) -> Any:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            side = args[0] if isinstance(module, DECONV_TYPES) and args else output  # a deconv's MACs: per input
            if isinstance(side, torch.Tensor):
                sizes[name] = math.prod(side.shape[2:]) if isinstance(module, _ConvNd) else 1
        return hook

    # --- recording ------------------------------------------------------------------------------------------
    def start_record(self) -> None:
        """Record the readers' inputs on every forward with gradients (idempotent)."""
        if self._handles:
            return
        for reader in self._reads:
            self._handles.append(self.units.modules[reader].register_forward_pre_hook(self._record_hook(reader)))

    def end_record(self) -> None:
        """Stop recording."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _record_hook(self, name: str) -> Any:
        def hook(module: nn.Module, args: tuple) -> None:
            x = args[0] if args else None
            if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
                self._inputs.setdefault(name, []).append(x)
        return hook

    def arm(self) -> None:
        """After a forward pass: run :meth:`step` as soon as the backward pass has the recorded inputs' gradients.

        Call it once per training forward (the razor algorithm and the smash adapter do); a forward that is
        never backpropagated is forgotten at the next ``arm``.
        """
        recorded, self._inputs = self._inputs, {}
        names = [n for n, xs in recorded.items() for _ in xs]
        tensors = [x for xs in recorded.values() for x in xs]
        if not tensors:
            return

        def on_grads(grads: Any) -> None:
            self._grads = {}
            inputs: dict[str, list[torch.Tensor]] = {}
            for name, x, g in zip(names, tensors, grads, strict=True):
                if g is not None:
                    inputs.setdefault(name, []).append(x.detach())
                    self._grads.setdefault(name, []).append(g.detach())
            self._recorded = inputs
            self.step()

        torch.autograd.graph.register_multi_grad_hook(tensors, on_grads)

    def reset_recorded(self) -> None:
        """Forget the recorded activations and gradients."""
        self._recorded, self._grads = {}, {}

    # --- importance -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def batch_fisher(self, unit: ChannelUnit) -> torch.Tensor | None:
        """The current batch's Fisher information of each channel of ``unit`` (None: nothing recorded)."""
        total = None
        for reader, (pos, ids) in unit.readers.items():
            inputs, grads = self._recorded.get(reader, []), self._grads.get(reader, [])
            for x, g in zip(inputs, grads, strict=True):
                prod = (x * g).double()
                per = prod.sum(dim=tuple(range(2, prod.dim()))) if x.dim() > 2 else prod.reshape(-1, prod.shape[-1])
                contrib = per.new_zeros(per.shape[0], unit.num_channels)
                contrib.index_add_(1, torch.from_numpy(ids).to(per.device), per[:, torch.from_numpy(pos).to(
                    per.device)])
                total = contrib if total is None else total + contrib
        return None if total is None else (total ** 2).sum(0).cpu()

    def _active_in(self, layer: str) -> int:
        module = self.units.modules[layer]
        width = module.in_features if isinstance(module, nn.Linear) else module.in_channels
        for unit, ids in self._reads.get(layer, []):
            width -= int((unit.mask.detach()[torch.from_numpy(ids)] == 0).sum())
        return max(width, 1)

    def _active_out(self, layer: str) -> int:
        module = self.units.modules[layer]
        width = module.out_features if isinstance(module, nn.Linear) else module.out_channels
        for unit in self.units.units:
            idx = unit.producers.get(layer)
            if idx is not None:
                inside = idx[idx >= 0]
                width -= int((unit.mask.detach()[torch.from_numpy(inside)] == 0).sum())
        return max(width, 1)

    def delta(self, unit: ChannelUnit) -> float:
        """What removing one channel of ``unit`` saves (MACs or activation elements; 1 for ``"none"``)."""
        if self.normalization == "none":
            return 1.0
        sizes, modules = self._spatial, self.units.modules
        if self.normalization == "act":
            return float(sum(sizes.get(n, 1) for n in (*unit.producers, *unit.depthwise))) / 1e6
        total = 0.0
        for name in (*unit.producers, *unit.depthwise):
            module = modules[name]
            kernel = math.prod(module.kernel_size) if isinstance(module, _ConvNd) else 1
            groups = getattr(module, "groups", 1)
            total += sizes.get(name, 1) * kernel * (1 if groups > 1 else self._active_in(name))
        for name in unit.readers:
            module = modules[name]
            if name in unit.depthwise or getattr(module, "groups", 1) > 1:
                continue
            kernel = math.prod(module.kernel_size) if isinstance(module, _ConvNd) else 1
            total += sizes.get(name, 1) * kernel * self._active_out(name)
        return max(total, 1.0) / 1e9

    def importance(self, unit: ChannelUnit) -> torch.Tensor:
        """Accumulated normalised Fisher information; pruned channels read above every live one."""
        fisher = self.fisher[unit.name].clone()
        dead = unit.mask.detach() == 0
        return fisher.masked_fill(dead, float(fisher.max()) + 1.0)

    # --- the schedule ---------------------------------------------------------------------------------------
    def update(self) -> bool:
        """Add this batch's normalised Fisher information (after backward); False when nothing was recorded."""
        seen = False
        for unit in self.units.units:
            batch = self.batch_fisher(unit)
            if batch is not None:
                self.fisher[unit.name] += batch / self.delta(unit)
                seen = True
        self.reset_recorded()
        return seen

    def step(self) -> bool:
        """After a backward pass: accumulate, and every ``interval`` steps prune one channel; True if it pruned."""
        if not self.update():
            return False
        self.iteration += 1
        if self.iteration % self.interval:
            return False
        pruned = False
        for _ in range(self.channels_per_prune):
            if not self.try_prune():
                break
            pruned = True
        for table in self.fisher.values():
            table.zero_()
        return pruned

    def done(self) -> bool:
        """Whether the MACs target is reached (never, without a target)."""
        return self.target is not None and self.units.macs_ratio() <= self.target

    def try_prune(self) -> bool:
        """Mask the live channel of least importance over all units; False when none can go or a NaN was seen."""
        if self.done():
            return False
        best: tuple[float, ChannelUnit, int] | None = None
        for unit in self.units.units:
            if unit.activated_channels <= 1:
                continue
            imp = self.importance(unit)
            if torch.isnan(imp).any():
                return False
            value, index = float(imp.min()), int(imp.argmin())
            if best is None or value < best[0]:
                best = (value, unit, index)
        if best is None:
            return False
        value, unit, index = best
        mask = unit.mask.detach().clone()
        mask[index] = 0.0
        unit.mask = mask
        self.history.append((unit.name, index, value))
        return True

    def round_units(self) -> None:
        """Move every unit's kept count to the nearest multiple of ``round_to`` (once pruning is over).

        Channels come back most recently pruned first; more go by least importance (L1 norm where no Fisher
        information was gathered since the last pruning).
        """
        for unit in self.units.units:
            live = unit.mask.detach() != 0
            kept = int(live.sum())
            want = round_kept(kept, unit.num_channels, self.round_to)
            if want > kept:
                back = [i for name, i, _ in reversed(self.history) if name == unit.name and not live[i]]
                unit.keep([*np.flatnonzero(live.numpy()).tolist(), *dict.fromkeys(back)][:want])
            elif want < kept:
                fisher = self.fisher[unit.name]
                score = fisher if bool((fisher[live] != 0).any()) else self.units.l1_scores(unit)
                score = score.masked_fill(~live, math.inf)
                drop = set(lowest_indices(score, kept - want).tolist())
                unit.keep(i for i in np.flatnonzero(live.numpy()).tolist() if i not in drop)

    def deploy(self) -> dict[str, Any]:
        """Stop recording, round the kept counts and remove the pruned channels for real; returns ``kept_channels``."""
        self.round_units()
        self.end_record()
        self.reset_recorded()
        self._inputs = {}
        return self.units.deploy()

