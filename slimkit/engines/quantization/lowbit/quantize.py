"""Model-level entry points: quantize a model's Linear layers in place with RTN, HQQ, GPTQ or AWQ.

Each function swaps the selected layers for :class:`PackedLinear` (MoE experts modules for
:class:`~.experts.PackedExperts`, quantized expert by expert in :mod:`.experts_quantize`) and returns
``{layer name: spec}``, the JSON record from which :func:`replay_layers` (:func:`~.experts.replay_experts` for
specs of kind ``"experts"``) rebuilds empty packed layers of the right shapes on load. Weights are
processed one layer (RTN, HQQ) or one transformer block (GPTQ, AWQ) at a time, so peak memory stays near the
model plus one layer's or one block's working set.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Collection, Iterable
from typing import Any

import torch
from torch import nn

from slimkit.core.weights import EXPERTS
from slimkit.engines.quantization.lowbit import awq as awq_mod
from slimkit.engines.quantization.lowbit.calibration import BlockQuantizer, run_blockwise
from slimkit.engines.quantization.lowbit.experts_quantize import (
    ExpertsCalibrator,
    WithExperts,
    quantize_experts_hqq,
    quantize_experts_rtn,
)
from slimkit.engines.quantization.lowbit.gptq import HessianAccumulator, quantize_gptq
from slimkit.engines.quantization.lowbit.hqq import quantize_hqq
from slimkit.engines.quantization.lowbit.layers import (
    KINDS,
    pack_layer,
    require_targets,
    weight_of,
)
from slimkit.engines.quantization.lowbit.linear import row_groups
from slimkit.engines.quantization.lowbit.rtn import quantize_rtn

Specs = dict[str, dict]
#: What the low-bit quantizers replace: dense layers (as PackedLinear) and MoE experts modules (as PackedExperts).
TARGET_KINDS: tuple[str, ...] = (*KINDS, EXPERTS)


def _targets(model: nn.Module, exclude: Iterable[str], what: str) -> tuple[list[str], list[str]]:
    """Names of the selected dense layers and of the selected experts modules (a ConfigError when none is left)."""
    chosen = require_targets(model, exclude, TARGET_KINDS, what)
    return [t.name for t in chosen if t.kind != EXPERTS], [t.name for t in chosen if t.kind == EXPERTS]


def _swap(model: nn.Module, name: str, q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, bits: int,
          group_size: int, input_scale: torch.Tensor | None = None) -> dict:
    layer = pack_layer(model.get_submodule(name), q, scales, zeros, bits, row_groups(group_size, q.shape[1]),
                       input_scale)
    model.set_submodule(name, layer)
    return layer.spec()


#: how a data-free quantizer treats one weight (codes, scales, zeros) and a list of experts modules (their specs)
LayerFunctions = tuple[Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                       Callable[[nn.Module, list[str]], Specs]]


def rtn_functions(bits: int, group_size: int, sym: bool) -> LayerFunctions:
    """Round-to-nearest of one weight and of experts modules, at these settings."""
    return (functools.partial(quantize_rtn, bits=bits, group_size=group_size, sym=sym),
            functools.partial(quantize_experts_rtn, bits=bits, group_size=group_size, sym=sym))


def hqq_functions(bits: int, group_size: int, iters: int, optimize_scale: bool) -> LayerFunctions:
    """HQQ of one weight and of experts modules, at these settings."""
    settings = {"bits": bits, "group_size": group_size, "iters": iters, "optimize_scale": optimize_scale}
    return functools.partial(quantize_hqq, **settings), functools.partial(quantize_experts_hqq, **settings)


@torch.no_grad()
def each_layer(model: nn.Module, names: list[str], experts: Collection[str], functions: LayerFunctions, bits: int,
               group_size: int) -> Specs:
    """Quantize each dense layer of ``names`` on its own weight, and the ``experts`` modules among them, in place."""
    quantize, quantize_experts = functions
    specs = {n: _swap(model, n, *quantize(weight_of(model.get_submodule(n))), bits, group_size)
             for n in names if n not in experts}
    specs.update(quantize_experts(model, [n for n in names if n in experts]))
    return specs


def quantize_model_rtn(model: nn.Module, bits: int = 4, group_size: int = 128, sym: bool = False,
                       exclude: Iterable[str] = ("lm_head",)) -> Specs:
    """Round-to-nearest every selected layer."""
    names, moe = _targets(model, exclude, "rtn")
    return each_layer(model, names + moe, moe, rtn_functions(bits, group_size, sym), bits, group_size)


def quantize_model_hqq(model: nn.Module, bits: int = 4, group_size: int = 128, iters: int = 20,
                       optimize_scale: bool = False, exclude: Iterable[str] = ("lm_head",)) -> Specs:
    """Half-quadratic optimisation of each selected layer's zeros (and scales); no data needed."""
    names, moe = _targets(model, exclude, "hqq")
    return each_layer(model, names + moe, moe, hqq_functions(bits, group_size, iters, optimize_scale), bits,
                      group_size)


class LayerStatsCollector(BlockQuantizer):
    """Shared bookkeeping: the layers fed one tensor are grouped (they share statistics and a quantization call)."""

    def __init__(self, bits: int, group_size: int, sym: bool) -> None:
        self.bits, self.group_size, self.sym = bits, group_size, sym
        self.specs: Specs = {}
        self._last: tuple[torch.Tensor, Any] | None = None

    def _add(self, table: dict[str, Any], name: str, x: torch.Tensor, make: Callable[..., Any]) -> None:
        """Add ``x`` to layer ``name``'s statistics in ``table`` (built by ``make(width, device)`` on first use).

        A layer fed the very tensor the previous one was (q/k/v, gate/up) shares that layer's statistics.
        """
        if self._last is not None and self._last[0] is x:
            table[name] = self._last[1]
            return
        entry = table.get(name)
        if entry is None:  # not setdefault: that would build (and fill) a discarded [in, in] matrix every call
            entry = table[name] = make(x.shape[-1], x.device)
        entry.add(x)
        self._last = (x, entry)

    @staticmethod
    def groups(names: list[str], shared: list[list[str]]) -> list[list[str]]:
        """The layers of one block in groups: those fed one tensor together, the others alone."""
        grouped = [g for g in shared if g]
        seen = {n for g in grouped for n in g}
        return grouped + [[n] for n in names if n not in seen]


class HessianCollector(LayerStatsCollector):
    """A collector whose statistics are each layer's input Hessian (GPTQ, SparseGPT)."""

    def __init__(self, bits: int, group_size: int, sym: bool) -> None:
        super().__init__(bits, group_size, sym)
        self.hessians: dict[str, HessianAccumulator] = {}

    def observe(self, name: str, x: torch.Tensor) -> None:  # noqa: D102
        self._add(self.hessians, name, x, HessianAccumulator)


class _GPTQ(HessianCollector):
    def __init__(self, bits: int, group_size: int, sym: bool, act_order: bool, damp: float, block_size: int,
                 clip_search: bool):
        super().__init__(bits, group_size, sym)
        self.act_order, self.damp, self.block_size, self.clip_search = act_order, damp, block_size, clip_search

    def quantize_block(self, model, block_name, block, names, shared, producers, probe=None) -> None:  # noqa: D102
        self._last = None
        for group in self.groups(names, shared):
            modules = [model.get_submodule(n) for n in group]
            # the Hessian (and a stacked weight) are handed over, not copied: each is freed once used
            own = len(modules) > 1
            w = _stacked_float32([weight_of(m) for m in modules]) if own else weight_of(modules[0])
            q, s, z = quantize_gptq(w, self._take(group), self.bits, self.group_size, self.sym, self.act_order,
                                    self.damp, self.block_size, self.clip_search, overwrite_w=own, overwrite_h=True)
            del w
            row = 0
            for n, m in zip(group, modules, strict=True):
                rows = weight_of(m).shape[0]
                self.specs[n] = _swap(model, n, q[row : row + rows], s[row : row + rows], z[row : row + rows],
                                      self.bits, self.group_size)
                row += rows
            # packed now: the codes, and the replaced layer the loop variable holds, would otherwise stay alive
            # through the next group's GPTQ
            del q, s, z, m, modules
        self.hessians.clear()

    def _take(self, group: list[str]) -> torch.Tensor:
        """The group's float32 Hessian (its first layer's), removed from the table: no reference stays here."""
        accumulators = [self.hessians.pop(n) for n in group if n in self.hessians]
        h, accumulators[0].h = accumulators[0].h, torch.empty(0)
        return h


def _stacked_float32(weights: list[torch.Tensor]) -> torch.Tensor:
    """The weights stacked by rows in one float32 buffer, the one GPTQ works in (no stacked copy in their dtype)."""
    first = weights[0]
    out = torch.empty(sum(w.shape[0] for w in weights), first.shape[1], dtype=torch.float32, device=first.device)
    row = 0
    for w in weights:
        out[row : row + w.shape[0]].copy_(w.detach())
        row += w.shape[0]
    return out


class _AWQ(LayerStatsCollector):
    def __init__(self, bits: int, group_size: int, sym: bool, n_grid: int, clip_search: bool,
                 fold_only: bool = False):
        super().__init__(bits, group_size, sym)
        self.n_grid, self.clip_grid, self.fold_only = n_grid, 10 if clip_search else 1, fold_only
        self.stats: dict[str, awq_mod.ActivationStats] = {}

    def observe(self, name: str, x: torch.Tensor) -> None:  # noqa: D102
        self._add(self.stats, name, x, awq_mod.ActivationStats)

    def quantize_block(self, model, block_name, block, names, shared, producers, probe=None) -> None:  # noqa: D102
        self._last = None
        plans = []
        for group in self.groups(names, shared):
            weights = [weight_of(model.get_submodule(n)) for n in group]
            stats = self.stats[group[0]]
            s, _ = awq_mod.search_scale(stats, weights, self.bits, self.group_size, self.sym, self.n_grid)
            importance = torch.diagonal(stats.h) / s.pow(2)  # mean squared (scaled) activation per input channel
            plans.append((group, s, importance, awq_mod.fold_target(model, group, producers.get(group[0]))))
        plans = self._scale(model, plans, probe, self.fold_only)
        for group, s, importance, target in plans:
            for n in group:
                q, sc, z = quantize_rtn(weight_of(model.get_submodule(n)), self.bits, self.group_size, self.sym,
                                        importance, self.clip_grid)
                unscaled = target is not None or (self.fold_only and bool((s == 1).all()))
                self.specs[n] = _swap(model, n, q, sc, z, self.bits, self.group_size, None if unscaled else 1.0 / s)
        self.stats.clear()

    @staticmethod
    @torch.no_grad()
    def _scale(model: nn.Module, plans: list, probe: Callable[[], torch.Tensor] | None,
               fold_only: bool = False) -> list:
        """Scale every weight (and fold ``1 / s``) before any is quantized, since folds touch other layers.

        With the folds applied (and before the layers whose ``1 / s`` becomes an input scale are scaled), the float
        block must compute the same function; ``probe`` (one block forward) checks it. If a fold was not exact
        (e.g. a norm that computes ``1 + weight``), the folds are undone and every layer keeps an input scale.
        With ``fold_only`` a layer with nowhere to fold gets ``s = 1`` instead (no scaling, no input scale).
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
        if fold_only:  # nowhere to fold: AutoAWQ's rule, the layer is not scaled at all
            plans = [(g, s if t is not None and folded else torch.ones_like(s),
                      imp * s.pow(2) if not (t is not None and folded) else imp, t) for g, s, imp, t in plans]
        for group, s, _, target in plans:
            if target is None or not folded:
                for n in group:
                    awq_mod.scale_weight(model.get_submodule(n), s)
        return plans


def run_calibrated(model: nn.Module, ids: torch.Tensor, exclude: Iterable[str], worker: LayerStatsCollector,
                   batch_size: int, method: str, experts: ExpertsCalibrator) -> Specs:
    """Quantize every selected target of ``model`` block by block with ``worker``, calibrated on ``ids``."""
    names, moe = _targets(model, exclude, method)  # MoE experts modules: calibrated per expert by `experts`
    was_training = model.training
    model.eval()
    try:
        outside = run_blockwise(model, ids, names + moe, WithExperts(worker, experts, moe, worker.specs) if moe
                                else worker, batch_size)
    finally:
        model.train(was_training)
    experts.warn_fallback(method)
    worker.specs.update(rtn_outside(model, outside, set(moe), worker, method))
    return {n: worker.specs[n] for n in names + moe}


def rtn_outside(model: nn.Module, names: list[str], experts: Collection[str], worker: LayerStatsCollector,
                method: str) -> Specs:
    """Round-to-nearest at ``worker``'s settings, with a warning: outside the blocks there are no calibrated inputs."""
    dense = [n for n in names if n not in experts]
    if dense:
        warnings.warn(f"{method}: layers outside the transformer blocks ({', '.join(dense)}) have no calibrated "
                      "inputs here and were quantized with round-to-nearest.", RuntimeWarning, stacklevel=3)
    functions = rtn_functions(worker.bits, worker.group_size, worker.sym)
    return each_layer(model, names, experts, functions, worker.bits, worker.group_size)


def quantize_model_gptq(model: nn.Module, calibration_ids: torch.Tensor, bits: int = 4, group_size: int = 128,
                        sym: bool = False, act_order: bool = True, damp: float = 0.01, block_size: int = 128,
                        exclude: Iterable[str] = ("lm_head",), batch_size: int = 1, clip_search: bool = True,
                        min_expert_tokens: int | None = None) -> Specs:
    """GPTQ every selected layer, block by block, with Hessians from ``calibration_ids [n, seq_len]``.

    MoE experts are GPTQ'd one by one on the tokens routed to them; those with fewer than ``min_expert_tokens``
    (default ``max(16, hidden // 8)``) fall back to round-to-nearest (see :mod:`.experts_quantize`).
    """
    experts = ExpertsCalibrator("gptq", bits, group_size, sym, min_expert_tokens, act_order=act_order, damp=damp,
                                block_size=block_size, clip_search=clip_search)
    return run_calibrated(model, calibration_ids, exclude,
                _GPTQ(bits, group_size, sym, act_order, damp, block_size, clip_search), batch_size, "gptq", experts)


def quantize_model_awq(model: nn.Module, calibration_ids: torch.Tensor, bits: int = 4, group_size: int = 128,
                       sym: bool = False, n_grid: int = 10,
                       exclude: Iterable[str] = ("lm_head",), batch_size: int = 1, clip_search: bool = True,
                       min_expert_tokens: int | None = None, fold_only: bool = False) -> Specs:
    """AWQ-scale then round-to-nearest every selected layer, block by block, on ``calibration_ids``.

    With ``clip_search`` each group's range is also shrunk where that lowers the activation-weighted error. With
    ``fold_only`` only layers whose inverse scale folds into a preceding layer are scaled (no input scales). MoE
    experts are scaled one by one on the tokens routed to them; those with fewer than ``min_expert_tokens`` fall
    back to round-to-nearest.
    """
    experts = ExpertsCalibrator("awq", bits, group_size, sym, min_expert_tokens, n_grid=n_grid, clip_search=clip_search)
    return run_calibrated(model, calibration_ids, exclude, _AWQ(bits, group_size, sym, n_grid, clip_search, fold_only),
                batch_size, "awq", experts)
