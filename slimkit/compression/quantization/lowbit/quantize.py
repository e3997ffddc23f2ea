"""Model-level entry points: quantize a model's Linear layers in place with RTN, HQQ, GPTQ or AWQ.

Each function swaps the selected layers for :class:`PackedLinear` and returns ``{layer name: spec}``, the JSON
record from which :func:`replay_layers` rebuilds empty packed layers of the right shapes on load. Weights are
processed one layer (RTN, HQQ) or one transformer block (GPTQ, AWQ) at a time, so peak memory stays near the
model plus one layer's or one block's working set.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

import torch
from torch import nn

from slimkit.compression.quantization.lowbit import awq as awq_mod
from slimkit.compression.quantization.lowbit.calibration import BlockQuantizer, run_blockwise
from slimkit.compression.quantization.lowbit.gptq import HessianAccumulator, quantize_gptq
from slimkit.compression.quantization.lowbit.hqq import quantize_hqq
from slimkit.compression.quantization.lowbit.layers import (
    pack_layer,
    replace_module,
    require_layers,
    select_layers,
    weight_of,
)
from slimkit.compression.quantization.lowbit.rtn import quantize_rtn

Specs = dict[str, dict]


def _swap(model: nn.Module, name: str, q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, bits: int,
          group_size: int, input_scale: torch.Tensor | None = None) -> dict:
    layer = pack_layer(model.get_submodule(name), q, scales, zeros, bits, group_size, input_scale)
    replace_module(model, name, layer)
    return layer.spec()


@torch.no_grad()
def quantize_model_rtn(model: nn.Module, bits: int = 4, group_size: int = 128, sym: bool = False,
                       exclude: Iterable[str] = ("lm_head",)) -> Specs:
    """Round-to-nearest every selected layer."""
    names = require_layers(select_layers(model, exclude), exclude)
    return {n: _swap(model, n, *quantize_rtn(weight_of(model.get_submodule(n)), bits, group_size, sym),
                     bits, group_size) for n in names}


@torch.no_grad()
def quantize_model_hqq(model: nn.Module, bits: int = 4, group_size: int = 128, iters: int = 20,
                       optimize_scale: bool = False, exclude: Iterable[str] = ("lm_head",)) -> Specs:
    """Half-quadratic optimisation of each selected layer's zeros (and scales); no data needed."""
    names = require_layers(select_layers(model, exclude), exclude)
    specs = {}
    for n in names:
        w = weight_of(model.get_submodule(n))
        specs[n] = _swap(model, n, *quantize_hqq(w, bits, group_size, iters=iters, optimize_scale=optimize_scale),
                         bits, group_size)
    return specs


class _Collector(BlockQuantizer):
    """Shared bookkeeping: the layers fed one tensor are grouped (they share statistics and a quantization call)."""

    def __init__(self, bits: int, group_size: int, sym: bool) -> None:
        self.bits, self.group_size, self.sym = bits, group_size, sym
        self.specs: Specs = {}

    @staticmethod
    def groups(names: list[str], shared: list[list[str]]) -> list[list[str]]:
        grouped = [g for g in shared if g]
        seen = {n for g in grouped for n in g}
        return grouped + [[n] for n in names if n not in seen]


class _GPTQ(_Collector):
    def __init__(self, bits: int, group_size: int, sym: bool, act_order: bool, damp: float, block_size: int,
                 clip_search: bool):
        super().__init__(bits, group_size, sym)
        self.act_order, self.damp, self.block_size, self.clip_search = act_order, damp, block_size, clip_search
        self.hessians: dict[str, HessianAccumulator] = {}
        self._last: tuple[torch.Tensor, HessianAccumulator] | None = None

    def observe(self, name: str, x: torch.Tensor) -> None:
        if self._last is not None and self._last[0] is x:  # same tensor as the previous layer: same Hessian
            self.hessians[name] = self._last[1]
            return
        acc = self.hessians.setdefault(name, HessianAccumulator(x.shape[-1], x.device))
        acc.add(x)
        self._last = (x, acc)

    def quantize_block(self, model, block_name, block, names, shared, producers, probe=None) -> None:  # noqa: D102
        self._last = None
        for group in self.groups(names, shared):
            modules = [model.get_submodule(n) for n in group]
            # the Hessian (and a concatenated weight) are handed over, not copied: each is freed once used
            own = len(modules) > 1
            w = torch.cat([weight_of(m) for m in modules], dim=0) if own else weight_of(modules[0])
            q, s, z = quantize_gptq(w, self._take(group), self.bits, self.group_size, self.sym, self.act_order,
                                    self.damp, self.block_size, self.clip_search, overwrite_w=own, overwrite_h=True)
            del w
            row = 0
            for n, m in zip(group, modules, strict=True):
                rows = weight_of(m).shape[0]
                self.specs[n] = _swap(model, n, q[row : row + rows], s[row : row + rows], z[row : row + rows],
                                      self.bits, self.group_size)
                row += rows
        self.hessians.clear()

    def _take(self, group: list[str]) -> torch.Tensor:
        """The group's float32 Hessian (its first layer's), removed from the table: no reference stays here."""
        accumulators = [self.hessians.pop(n) for n in group if n in self.hessians]
        h, accumulators[0].h = accumulators[0].h, torch.empty(0)
        return h


class _AWQ(_Collector):
    def __init__(self, bits: int, group_size: int, sym: bool, n_grid: int, clip_search: bool):
        super().__init__(bits, group_size, sym)
        self.n_grid, self.clip_grid = n_grid, 10 if clip_search else 1
        self.stats: dict[str, awq_mod.ActivationStats] = {}
        self._last: tuple[torch.Tensor, awq_mod.ActivationStats] | None = None

    def observe(self, name: str, x: torch.Tensor) -> None:
        if self._last is not None and self._last[0] is x:  # same tensor as the previous layer: same statistics
            self.stats[name] = self._last[1]
            return
        stats = self.stats.setdefault(name, awq_mod.ActivationStats(x.shape[-1], x.device))
        stats.add(x)
        self._last = (x, stats)

    def quantize_block(self, model, block_name, block, names, shared, producers, probe=None) -> None:  # noqa: D102
        self._last = None
        plans = []
        for group in self.groups(names, shared):
            weights = [weight_of(model.get_submodule(n)) for n in group]
            stats = self.stats[group[0]]
            s, _ = awq_mod.search_scale(stats, weights, self.bits, self.group_size, self.sym, self.n_grid)
            importance = torch.diagonal(stats.h) / s.pow(2)  # mean squared (scaled) activation per input channel
            plans.append((group, s, importance, awq_mod.fold_target(model, group, producers.get(group[0]))))
        plans = self._scale(model, plans, probe)
        for group, s, importance, target in plans:
            for n in group:
                q, sc, z = quantize_rtn(weight_of(model.get_submodule(n)), self.bits, self.group_size, self.sym,
                                        importance, self.clip_grid)
                self.specs[n] = _swap(model, n, q, sc, z, self.bits, self.group_size,
                                      None if target is not None else 1.0 / s)
        self.stats.clear()

    @staticmethod
    @torch.no_grad()
    def _scale(model: nn.Module, plans: list, probe: Callable[[], torch.Tensor] | None) -> list:
        """Scale every weight (and fold ``1 / s``) before any is quantized, since folds touch other layers.

        With the folds applied (and before the layers whose ``1 / s`` becomes an input scale are scaled), the float
        block must compute the same function; ``probe`` (one block forward) checks it. If a fold was not exact
        (e.g. a norm that computes ``1 + weight``), the folds are undone and every layer keeps an input scale.
        """
        folded = [p for p in plans if p[3] is not None]
        touched = {id(p): (p, p.detach().clone()) for group, _, _, target in folded
                   for m in [model.get_submodule(n) for n in group] + [target] for p in m.parameters(recurse=False)}
        before = probe() if probe is not None and folded else None
        for group, s, _, target in folded:
            for n in group:
                awq_mod.scale_weight(model.get_submodule(n), s)
            awq_mod.fold_inverse_scale(target, s)
        if before is not None:
            after = probe()
            if float((after - before).abs().max()) > 1e-3 * float(before.abs().max()) + 1e-6:
                for param, saved in touched.values():
                    param.copy_(saved)
                plans = [(group, s, importance, None) for group, s, importance, _ in plans]
                folded = []
        for group, s, _, target in plans:
            if target is None or not folded:
                for n in group:
                    awq_mod.scale_weight(model.get_submodule(n), s)
        return plans


def _run(model: nn.Module, ids: torch.Tensor, exclude: Iterable[str], worker: _Collector, batch_size: int,
         method: str) -> Specs:
    names = require_layers(select_layers(model, exclude), exclude)
    was_training = model.training
    model.eval()
    try:
        outside = run_blockwise(model, ids, names, worker, batch_size)
    finally:
        model.train(was_training)
    if outside:
        warnings.warn(f"{method}: layers outside the transformer blocks ({', '.join(outside)}) have no calibrated "
                      "inputs here and were quantized with round-to-nearest.", RuntimeWarning, stacklevel=3)
        for n in outside:
            worker.specs[n] = _swap(model, n, *quantize_rtn(weight_of(model.get_submodule(n)), worker.bits,
                                                            worker.group_size, worker.sym),
                                    worker.bits, worker.group_size)
    return {n: worker.specs[n] for n in names}


def quantize_model_gptq(model: nn.Module, calibration_ids: torch.Tensor, bits: int = 4, group_size: int = 128,
                        sym: bool = False, act_order: bool = True, damp: float = 0.01, block_size: int = 128,
                        exclude: Iterable[str] = ("lm_head",), batch_size: int = 1, clip_search: bool = True) -> Specs:
    """GPTQ every selected layer, block by block, with Hessians from ``calibration_ids [n, seq_len]``."""
    return _run(model, calibration_ids, exclude,
                _GPTQ(bits, group_size, sym, act_order, damp, block_size, clip_search), batch_size, "gptq")


def quantize_model_awq(model: nn.Module, calibration_ids: torch.Tensor, bits: int = 4, group_size: int = 128,
                       sym: bool = False, n_grid: int = 10,
                       exclude: Iterable[str] = ("lm_head",), batch_size: int = 1, clip_search: bool = True) -> Specs:
    """AWQ-scale then round-to-nearest every selected layer, block by block, on ``calibration_ids``.

    With ``clip_search`` each group's range is also shrunk where that lowers the activation-weighted error.
    """
    return _run(model, calibration_ids, exclude, _AWQ(bits, group_size, sym, n_grid, clip_search),
                batch_size, "awq")
