"""Quantize MoE experts modules into :class:`PackedExperts`: RTN and HQQ (no data), GPTQ and AWQ (calibrated).

Every expert is quantized on its own, one ``[out, in]`` matrix per projection, with the same routines as dense
layers (:mod:`.rtn`, :mod:`.hqq`, :mod:`.gptq`, :mod:`.awq`). The calibrated methods see, for each expert, only
the tokens the router sent to it: :class:`ExpertsCalibrator` receives every call of an experts module during
the block-by-block run (:func:`.calibration.run_blockwise`), splits the hidden states by ``top_k_index`` and
accumulates per-expert statistics of both projections' inputs (the down projection's input ``act(gate) * up`` is
computed from the float weights). An expert that received fewer than ``min_tokens`` tokens (default
:func:`default_min_tokens`) has too little data for a Hessian or activation statistics; it is quantized with
round-to-nearest instead, listed in the module's spec (``rtn_fallback``) and in a warning.

AWQ per expert: the down projection's scale is folded into the expert's own up rows (``act(g) * u`` is linear in
``u``; exact), the first projection's into a per-expert input scale (the shared input also feeds the router and
the other experts, so no earlier weight can absorb it).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.core.experts import ExpertsLayout, dense_weights, expert_activation, routed_pairs
from slimkit.engines.quantization.experts import DOWN, FIRST, replace_experts, require_layout
from slimkit.engines.quantization.lowbit import awq as awq_mod
from slimkit.engines.quantization.lowbit.calibration import BlockQuantizer
from slimkit.engines.quantization.lowbit.experts import PackedExperts, packed_like
from slimkit.engines.quantization.lowbit.gptq import HessianAccumulator, quantize_gptq
from slimkit.engines.quantization.lowbit.hqq import quantize_hqq
from slimkit.engines.quantization.lowbit.rtn import quantize_rtn

Specs = dict[str, dict]
Quantized = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _pack(model: nn.Module, name: str, bits: int, group_size: int,
          fn: Callable[[torch.Tensor], Quantized]) -> dict:
    return replace_experts(model, name, lambda module, layout: packed_like(module, layout, bits, group_size), fn)


@torch.no_grad()
def quantize_experts_rtn(model: nn.Module, names: list[str], bits: int = 4, group_size: int = 128,
                         sym: bool = False) -> Specs:
    """Round-to-nearest every expert of the named experts modules; returns their replay specs."""
    return {n: _pack(model, n, bits, group_size, lambda w: quantize_rtn(w, bits, group_size, sym)) for n in names}


@torch.no_grad()
def quantize_experts_hqq(model: nn.Module, names: list[str], bits: int = 4, group_size: int = 128, iters: int = 20,
                         optimize_scale: bool = False) -> Specs:
    """Half-quadratic quantization of every expert of the named experts modules; returns their replay specs."""
    return {n: _pack(model, n, bits, group_size,
                     lambda w: quantize_hqq(w, bits, group_size, iters=iters, optimize_scale=optimize_scale))
            for n in names}


def default_min_tokens(layout: ExpertsLayout) -> int:
    """Fewest routed calibration tokens for a calibrated expert: ``max(16, hidden // 8)``."""
    return max(16, layout.hidden // 8)


def _call_args(args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """``(hidden_states, top_k_index)`` of one experts call, positional or by keyword."""
    names = ("hidden_states", "top_k_index", "top_k_weights")
    values = dict(zip(names, args, strict=False)) | {k: v for k, v in kwargs.items() if k in names}
    return values["hidden_states"], values["top_k_index"]


class ExpertsCalibrator:
    """Per-expert statistics from the routed calls of experts modules, then per-expert GPTQ or AWQ.

    ``method`` is ``"gptq"`` (options: ``act_order``, ``damp``, ``block_size``, ``clip_search``) or ``"awq"``
    (options: ``n_grid``, ``clip_search``).
    """

    def __init__(self, method: str, bits: int, group_size: int, sym: bool, min_tokens: int | None = None,
                 **options: Any) -> None:
        if method not in ("gptq", "awq"):
            raise ValueError(f"method must be 'gptq' or 'awq'; got {method!r}.")
        self.method, self.bits, self.group_size, self.sym = method, bits, group_size, sym
        self.min_tokens, self.options = min_tokens, options
        self.stats: dict[str, dict[int, tuple[Any, Any]]] = {}
        self.tokens: dict[str, dict[int, int]] = {}
        #: experts quantized with RTN for lack of tokens: ``{module name: [expert, ...]}``
        self.fallback: dict[str, list[int]] = {}
        self._least: dict[str, int] = {}

    def _new_stats(self, width: int, device: torch.device) -> Any:
        return HessianAccumulator(width, device) if self.method == "gptq" else awq_mod.ActivationStats(width, device)

    @torch.no_grad()
    def observe(self, name: str, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """Add one call of experts module ``name``: each expert's routed tokens and its down projection's inputs."""
        layout = require_layout(module, name)
        hidden, index = _call_args(args, kwargs)
        flat = hidden.reshape(-1, layout.hidden)
        index = index.reshape(flat.shape[0], -1)
        first = dense_weights(module, layout)[0]
        stats, tokens = self.stats.setdefault(name, {}), self.tokens.setdefault(name, {})
        for e, positions in routed_pairs(index, layout.num_experts):
            x = flat[positions // index.shape[1]]
            if e not in stats:
                stats[e] = (self._new_stats(layout.hidden, x.device), self._new_stats(layout.intermediate, x.device))
            stats[e][0].add(x)
            stats[e][1].add(expert_activation(layout, module.act_fn, F.linear(x, first[e].to(x.dtype))))
            tokens[e] = tokens.get(e, 0) + x.shape[0]

    @torch.no_grad()
    def quantize(self, model: nn.Module, name: str) -> dict:
        """Replace experts module ``name`` by a PackedExperts from the statistics gathered; returns its spec."""
        module = model.get_submodule(name)
        layout = require_layout(module, name)
        least = self.min_tokens if self.min_tokens is not None else default_min_tokens(layout)
        awq = self.method == "awq"
        scales = (FIRST,) if not awq else (FIRST,) if layout.gated else (FIRST, DOWN)
        packed = packed_like(module, layout, self.bits, self.group_size, scales if awq else ())
        first_w, down_w = (w.detach() for w in dense_weights(module, layout))
        stats, tokens = self.stats.pop(name, {}), self.tokens.pop(name, {})
        for e in range(layout.num_experts):
            if tokens.get(e, 0) < least:
                packed.rtn_fallback.append(e)
                for which, w in ((FIRST, first_w[e]), (DOWN, down_w[e])):
                    packed.set_expert(which, e, *quantize_rtn(w, self.bits, self.group_size, self.sym))
                continue
            if awq:
                self._awq_expert(packed, layout, e, first_w[e], down_w[e], stats[e])
            else:
                for which, w, st in ((FIRST, first_w[e], stats[e][0]), (DOWN, down_w[e], stats[e][1])):
                    packed.set_expert(which, e, *self._gptq(w, st.h))
        if packed.rtn_fallback:
            self.fallback[name] = list(packed.rtn_fallback)
            self._least[name] = least
        model.set_submodule(name, packed)
        return packed.spec()

    def _gptq(self, w: torch.Tensor, h: torch.Tensor) -> Quantized:
        o = self.options
        return quantize_gptq(w, h, self.bits, self.group_size, self.sym, bool(o.get("act_order", True)),
                             float(o.get("damp", 0.01)), int(o.get("block_size", 128)),
                             bool(o.get("clip_search", True)))

    def _awq_expert(self, packed: PackedExperts, layout: ExpertsLayout, e: int, first: torch.Tensor,
                    down: torch.Tensor, stats: tuple[Any, Any]) -> None:
        grid, clip = int(self.options.get("n_grid", 10)), 10 if self.options.get("clip_search", True) else 1
        first, down = first.float().clone(), down.float().clone()
        s_down, _ = awq_mod.search_scale(stats[1], [down], self.bits, self.group_size, self.sym, grid)
        down_scale = None
        if layout.gated:  # down(act(g) * u) with u / s and W * s is the same function: fold 1 / s into the up rows
            first[layout.intermediate :] /= s_down.unsqueeze(1)
        else:
            down_scale = 1.0 / s_down
        importance = torch.diagonal(stats[1].h) / s_down.pow(2)
        packed.set_expert(DOWN, e, *quantize_rtn(down * s_down, self.bits, self.group_size, self.sym, importance, clip),
                          input_scale=down_scale)
        s_first, _ = awq_mod.search_scale(stats[0], [first], self.bits, self.group_size, self.sym, grid)
        importance = torch.diagonal(stats[0].h) / s_first.pow(2)
        packed.set_expert(FIRST, e, *quantize_rtn(first * s_first, self.bits, self.group_size, self.sym, importance,
                                                  clip), input_scale=1.0 / s_first)

    def warn_fallback(self, method: str) -> None:
        """One RuntimeWarning naming the experts quantized with RTN for lack of calibration tokens, if any."""
        if self.fallback:
            listed = "; ".join(f"{n}: experts {e} (fewer than {self._least[n]} tokens)"
                               for n, e in self.fallback.items())
            warnings.warn(f"{method}: these experts received too few calibration tokens and were quantized with "
                          f"round-to-nearest: {listed}. Use more calibration samples to calibrate them.",
                          RuntimeWarning, stacklevel=3)


class WithExperts(BlockQuantizer):
    """A block quantizer for dense layers plus an :class:`ExpertsCalibrator` for the experts modules among them.

    Calls of the experts modules go to the calibrator, the rest to ``dense``; the experts are left out of the
    dense quantizer's input-sharing groups (they read the same hidden states as, e.g., a shared expert's Linears,
    but are no Linear). Expert specs are written into ``specs`` (the dense quantizer's own dict).
    """

    def __init__(self, dense: BlockQuantizer, calibrator: ExpertsCalibrator, experts: list[str],
                 specs: Specs) -> None:
        self.dense, self.calibrator, self.experts, self.specs = dense, calibrator, set(experts), specs

    def observe(self, name: str, x: torch.Tensor) -> None:  # noqa: D102
        self.dense.observe(name, x)

    def observe_call(self, name: str, module: nn.Module, args: tuple, kwargs: dict) -> None:  # noqa: D102
        if name in self.experts:
            self.calibrator.observe(name, module, args, kwargs)
        else:
            self.dense.observe_call(name, module, args, kwargs)

    def quantize_block(self, model, block_name, block, names, shared, producers, probe=None) -> None:  # noqa: D102
        dense = [n for n in names if n not in self.experts]
        if dense:
            groups = [[n for n in g if n not in self.experts] for g in shared]
            self.dense.quantize_block(model, block_name, block, dense, [g for g in groups if g],
                                      {k: v for k, v in producers.items() if k not in self.experts}, probe)
        for name in names:
            if name in self.experts:
                self.specs[name] = self.calibrator.quantize(model, name)
