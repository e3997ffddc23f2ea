"""The MoE experts layout slimkit's quantized experts reproduce, and the routing every one of them runs.

transformers 5 keeps a mixture-of-experts layer's experts as 3-D parameters inside one module (``MixtralExperts``,
``Qwen2MoeExperts``, ``Qwen3MoeExperts``, ``OlmoeExperts``...) called as
``experts(hidden_states [T, H], top_k_index [T, K], top_k_weights [T, K]) -> [T, H]``. Each expert ``e`` computes

* gated (``has_gate``): ``down_proj[e] @ (act_fn(g) * u)`` with ``g, u = (gate_up_proj[e] @ x).chunk(2)``,
  ``gate_up_proj [E, 2I, H]`` (gate rows first, then up rows: the "concatenated" layout), ``down_proj [E, H, I]``;
* ungated: ``down_proj[e] @ act_fn(up_proj[e] @ x)`` with ``up_proj [E, I, H]``,

(or every weight stored transposed, ``[E, in, out]``, where the module's ``is_transposed`` says so)

and the layer returns ``sum_k top_k_weights[t, k] * expert_{top_k_index[t, k]}(x_t)``. :func:`experts_layout`
says whether a module has exactly that layout, and :func:`unsupported_reason` why not (expert biases,
interleaved gate/up storage, a custom gate such as GPT-OSS's clamped SwiGLU, a norm after each expert, or a
``forward`` that computes something else, found by running it once against :func:`reference_forward`).
:func:`moe_forward` is the routing loop the quantized experts modules share with the reference.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["ExpertsLayout", "call_macs", "dense_weights", "experts_layout", "moe_forward", "reference_forward",
           "routed_pairs", "unsupported_reason"]

#: The word a coverage reason starts with (the same as :data:`slimkit.core.weights.UNSUPPORTED`).
_UNSUPPORTED = "unsupported"
#: The flags transformers' ``use_experts_implementation`` sets on an experts instance: (the value slimkit needs,
#: what another value means)
_FLAGS = {"has_bias": (False, "expert biases"), "is_concatenated": (True, "interleaved gate/up rows"),
          "has_post_expert_norm": (False, "a norm after each expert"),
          "_is_expert_parallel": (False, "expert parallelism")}


@functools.cache
def _default_gate() -> Callable | None:
    """The default ``_apply_gate`` (``act_fn(gate) * up`` on ``chunk(2)``), or None where it is missing."""
    try:
        from transformers.integrations.moe import _default_apply_gate
    except ImportError:  # pragma: no cover - transformers is a dependency
        return None
    return _default_apply_gate


@dataclass(frozen=True)
class ExpertsLayout:
    """Shapes and parameter names of a supported experts module."""

    num_experts: int
    hidden: int  #: H, the model width (input of the first projection, output of the second)
    intermediate: int  #: I, the width each expert computes in
    gated: bool  #: True: ``gate_up_proj [E, 2I, H]``; False: ``up_proj [E, I, H]``
    transposed: bool = False  #: stored ``[E, in, out]`` (transformers' ``is_transposed``, e.g. Aria)

    @property
    def first(self) -> str:
        """Name of the first projection's 3-D parameter (``gate_up_proj`` or ``up_proj``)."""
        return "gate_up_proj" if self.gated else "up_proj"

    @property
    def first_rows(self) -> int:
        """Output rows of the first projection per expert (``2I`` gated, ``I`` ungated)."""
        return 2 * self.intermediate if self.gated else self.intermediate

    def macs_per_pair(self) -> int:
        """Multiply-accumulates of one (token, expert) pair: both projections."""
        return self.first_rows * self.hidden + self.hidden * self.intermediate


def _structure(module: nn.Module) -> ExpertsLayout | str:
    """The layout from the module's flags, parameter names and shapes, else the reason it is not supported."""
    kind = type(module).__name__
    bad = [w for flag, (need, w) in _FLAGS.items() if hasattr(module, flag) and getattr(module, flag) != need]
    if bad:
        return f"{_UNSUPPORTED}: {kind} has {', '.join(bad)}, which slimkit's quantized experts do not represent"
    gate = getattr(type(module), "_apply_gate", None)
    if gate is not None and gate is not _default_gate():
        return (f"{_UNSUPPORTED}: {kind} has its own gate function (_apply_gate, e.g. a clamped or interleaved "
                "SwiGLU), which slimkit's quantized experts do not represent")
    params = dict(module.named_parameters(recurse=False))
    gated = "gate_up_proj" in params
    first = "gate_up_proj" if gated else "up_proj"
    names = {first, "down_proj"}
    if first not in params or "down_proj" not in params or set(params) != names:
        return (f"{_UNSUPPORTED}: {kind} holds parameters {sorted(params)}; slimkit's quantized experts need exactly "
                "['down_proj', 'gate_up_proj'] (or ['down_proj', 'up_proj']) and an act_fn")
    if not callable(getattr(module, "act_fn", None)):
        return f"{_UNSUPPORTED}: {kind} has no act_fn (the activation between its two projections)"
    if getattr(module, "has_gate", gated) != gated:
        return f"{_UNSUPPORTED}: {kind}.has_gate={module.has_gate} does not match its parameters {sorted(params)}"
    up, down = params[first], params["down_proj"]
    n = getattr(module, "num_experts", None)
    transposed = bool(getattr(module, "is_transposed", False))
    order = "[E, in, out]" if transposed else "[E, out, in]"
    if up.dim() != 3 or down.dim() != 3 or up.shape[0] != n or down.shape[0] != n:
        return f"{_UNSUPPORTED}: {kind} weights {tuple(up.shape)} and {tuple(down.shape)} are not {order}"
    hidden, inter = (int(down.shape[2]), int(down.shape[1])) if transposed else (int(down.shape[1]), int(down.shape[2]))
    rows = 2 * inter if gated else inter
    want = (hidden, rows) if transposed else (rows, hidden)
    if tuple(up.shape[1:]) != want:
        return (f"{_UNSUPPORTED}: {kind}.{first} is {tuple(up.shape)}; with down_proj {tuple(down.shape)} stored "
                f"{order} it must be [{n}, {want[0]}, {want[1]}]")
    return ExpertsLayout(int(n), hidden, inter, gated, transposed)


def dense_weights(module: nn.Module, layout: ExpertsLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """``(first [E, rows, H], down [E, H, I])`` of an experts module: views in ``[E, out, in]`` order, never copies."""
    first, down = getattr(module, layout.first), module.down_proj
    if layout.transposed:
        return first.transpose(1, 2), down.transpose(1, 2)
    return first, down


def experts_layout(module: nn.Module) -> ExpertsLayout | None:
    """The layout of ``module`` when it is an experts module slimkit's quantized experts reproduce, else None."""
    found = _structure(module)
    return found if isinstance(found, ExpertsLayout) and unsupported_reason(module) is None else None


_PROBED: weakref.WeakKeyDictionary[nn.Module, tuple[tuple, str | None]] = weakref.WeakKeyDictionary()


def unsupported_reason(module: nn.Module) -> str | None:
    """Why ``module`` (an experts module) cannot be replaced by a quantized one, or None when it can.

    Checks the flags, parameter names and shapes (:class:`ExpertsLayout`), then, for modules with real weights,
    runs ``module.forward`` once on a seeded random input routed to every expert and compares it with
    :func:`reference_forward` (cached until the weights change), so a family whose forward differs is refused.
    """
    found = _structure(module)
    if isinstance(found, str):
        return found
    weights = list(dense_weights(module, found))
    if any(w.device.type == "meta" for w in weights):
        return None
    key = tuple((w.data_ptr(), w._version) for w in weights)
    cached = _PROBED.get(module)
    if cached is not None and cached[0] == key:
        return cached[1]
    reason = _probe(module, found)
    _PROBED[module] = (key, reason)
    return reason


def _probe(module: nn.Module, layout: ExpertsLayout) -> str | None:
    first, down = dense_weights(module, layout)
    n = layout.num_experts
    k = min(2, n)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, layout.hidden, generator=gen).to(first.dtype)
    index = (torch.arange(n).unsqueeze(1) + torch.arange(k)) % n
    weights = torch.rand(n, k, generator=gen).to(first.dtype)
    kind = type(module).__name__
    try:
        with torch.no_grad():
            out = module(x.to(first.device), index.to(first.device), weights.to(first.device))
            ref = reference_forward(layout, first, down, module.act_fn, x.to(first.device), index.to(first.device),
                                    weights.to(first.device))
    except Exception as exc:  # any failure: not the experts contract
        return (f"{_UNSUPPORTED}: {kind}.forward(hidden_states, top_k_index, top_k_weights) raised "
                f"{type(exc).__name__} on a routed random input")
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return f"{_UNSUPPORTED}: {kind}.forward returned {got}, expected {tuple(ref.shape)}"
    tol = 1e-4 if first.dtype in (torch.float32, torch.float64) else 2e-2
    err = float((out.float() - ref.float()).abs().max())
    scale = float(ref.float().abs().max()) + 1e-6
    if not err <= tol * scale:
        return (f"{_UNSUPPORTED}: {kind}.forward is not the standard routed experts computation (relative difference "
                f"{err / scale:.3g} on a random input)")
    return None


def call_macs(module: nn.Module, args: tuple) -> int | None:
    """MACs of one call ``module(hidden_states, top_k_index, top_k_weights)`` of a float experts module.

    Both projections of every routed (token, expert) pair; None when ``module`` has no experts layout slimkit knows
    (then only what a FLOP counter sees inside it counts). Counters need it because transformers' default
    ``grouped_mm`` experts path is invisible to ``torch.utils.flop_counter``.
    """
    found = _structure(module)
    index = args[1] if len(args) > 1 else None
    if not isinstance(found, ExpertsLayout) or not isinstance(index, torch.Tensor):
        return None
    return int(((index >= 0) & (index < found.num_experts)).sum()) * found.macs_per_pair()


#: routed pairs up to which :func:`routed_pairs` groups them in Python (decode batches)
_FEW_PAIRS = 64


def routed_pairs(top_k_index: torch.Tensor, num_experts: int) -> list[tuple[int, torch.Tensor]]:
    """``[(expert, positions)]`` for every expert that received tokens; positions index ``top_k_index.reshape(-1)``.

    Positions are in token order within each expert; indices outside ``[0, num_experts)`` (expert-parallel
    sentinels) are skipped. One host sync for the counts.
    """
    flat = top_k_index.reshape(-1)
    if flat.numel() <= _FEW_PAIRS:  # decode: one host read and a few tiny index tensors beat sort + bincount
        groups: dict[int, list[int]] = {}
        for position, e in enumerate(flat.tolist()):
            if 0 <= e < num_experts:
                groups.setdefault(e, []).append(position)
        return [(e, torch.tensor(groups[e], dtype=torch.long, device=flat.device)) for e in sorted(groups)]
    valid = (flat >= 0) & (flat < num_experts)
    keys = torch.where(valid, flat, torch.full_like(flat, num_experts))
    order = torch.argsort(keys, stable=True)
    counts = torch.bincount(keys, minlength=num_experts + 1)[:num_experts].tolist()
    pairs, start = [], 0
    for e, c in enumerate(counts):
        if c:
            pairs.append((e, order[start : start + c]))
            start += c
    return pairs


def moe_forward(
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    num_experts: int,
    expert: Callable[[int, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """``sum_k top_k_weights[t, k] * expert(top_k_index[t, k], x_t)`` for ``hidden_states [T, H]``.

    ``expert(e, x [n, H]) -> [n, H]`` runs expert ``e`` on the tokens routed to it; the result has
    ``hidden_states``' dtype, like transformers' eager experts forward.
    """
    k = top_k_index.shape[-1]
    out = torch.zeros_like(hidden_states)
    weights = top_k_weights.reshape(-1)
    for e, positions in routed_pairs(top_k_index, num_experts):
        tokens = positions // k
        y = expert(e, hidden_states[tokens]) * weights[positions].unsqueeze(-1)
        out.index_add_(0, tokens, y.to(out.dtype))
    return out


def expert_activation(layout: ExpertsLayout, act_fn: Callable, first_out: torch.Tensor) -> torch.Tensor:
    """The input of the down projection from the first projection's output: ``act(gate) * up`` or ``act(up)``."""
    if layout.gated:
        gate, up = first_out.chunk(2, dim=-1)
        return act_fn(gate) * up
    return act_fn(first_out)


def reference_forward(
    layout: ExpertsLayout,
    first: torch.Tensor,
    down: torch.Tensor,
    act_fn: Callable,
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
) -> torch.Tensor:
    """The experts layer in plain torch on dense weights ``first [E, rows, H]`` and ``down [E, H, I]``."""
    def expert(e: int, x: torch.Tensor) -> torch.Tensor:
        h = expert_activation(layout, act_fn, nn.functional.linear(x, first[e]))
        return nn.functional.linear(h, down[e])

    return moe_forward(hidden_states, top_k_index, top_k_weights, layout.num_experts, expert)
