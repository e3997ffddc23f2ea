"""Mixture-of-experts modules whose experts live in 3-D parameters (transformers 5 layout), and their shrink.

``gate_up_proj [E, 2I, H]`` (gate rows, then up rows) and ``down_proj [E, H, I]``, an ``act_fn``, called as
``experts(hidden_states [T, H], top_k_index, top_k_weights)`` (Mixtral, Qwen2/3-MoE, OLMoE and others share
it). To the speedup such a module is one unit: it reads the hidden channels (the columns of ``gate_up_proj``),
produces hidden channels (the rows of ``down_proj``), and owns ``E * I`` intermediate channels, expert ``e``'s
channel ``i`` being row ``i`` (and ``I + i``) of ``gate_up_proj[e]`` and column ``i`` of ``down_proj[e]``.
The 3-D layout needs every expert to keep the same number of intermediate channels (which ones may differ).
The router is a separate module and keeps its experts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .errors import SpeedupError, check_kept
from .layers import own_params


@dataclass
class ExpertsSpec:
    """Sizes of a recognised experts module."""

    num_experts: int
    intermediate: int
    hidden: int


def experts_spec(module: nn.Module) -> ExpertsSpec | None:
    """Recognise a 3-D experts module (see the module docstring), or None."""
    params = own_params(module)
    if set(params) != {"gate_up_proj", "down_proj"} or not callable(getattr(module, "act_fn", None)):
        return None
    gate_up, down = params["gate_up_proj"], params["down_proj"]
    if gate_up.dim() != 3 or down.dim() != 3 or gate_up.shape[1] % 2:
        return None
    e, two_i, h = gate_up.shape
    if tuple(down.shape) != (e, h, two_i // 2) or any(True for _ in module.children() if any(_.parameters())):
        return None
    return ExpertsSpec(e, two_i // 2, h)


def shrink_experts(name: str, module: nn.Module, entry: Mapping[str, Any]) -> None:
    """Shrink to ``{"out": hidden rows, "in": hidden columns, "inner": [kept channels of each expert]}``."""
    spec = experts_spec(module)
    if spec is None:
        raise SpeedupError(f"kept_channels names {name!r} as a MoE experts module, but it is a {type(module).__name__} "
                           "without 3-D gate_up_proj/down_proj parameters.")
    out = check_kept(name, "out", entry.get("out"), spec.hidden)
    inn = check_kept(name, "in", entry.get("in"), spec.hidden)
    inner = entry.get("inner") or [list(range(spec.intermediate))] * spec.num_experts
    if not isinstance(inner, Sequence) or len(inner) != spec.num_experts:
        raise SpeedupError(f"kept_channels[{name!r}]['inner'] must list the kept channels of each of the "
                           f"{spec.num_experts} experts; got {inner!r:.80}.")
    count = len(inner[0]) if isinstance(inner[0], Sequence) else None
    kept = [check_kept(name, "inner", rows, spec.intermediate, count) for rows in inner]
    gate_up, down = module.gate_up_proj, module.down_proj
    dev = gate_up.device
    rows = torch.tensor([[*k, *[i + spec.intermediate for i in k]] for k in kept], device=dev)
    cols = torch.tensor(inn, device=dev)
    new_gate_up = torch.stack([gate_up[e].index_select(0, rows[e]).index_select(1, cols)
                               for e in range(spec.num_experts)])
    inner_idx = torch.tensor(kept, device=dev)
    out_idx = torch.tensor(out, device=dev)
    new_down = torch.stack([down[e].index_select(0, out_idx).index_select(1, inner_idx[e])
                            for e in range(spec.num_experts)])
    module.gate_up_proj = nn.Parameter(new_gate_up.detach().clone(), requires_grad=gate_up.requires_grad)
    module.down_proj = nn.Parameter(new_down.detach().clone(), requires_grad=down.requires_grad)
    for attr, value in (("intermediate_dim", len(kept[0])), ("intermediate_size", len(kept[0])),
                        ("hidden_dim", len(inn)), ("hidden_size", len(inn))):
        if isinstance(getattr(module, attr, None), int):
            setattr(module, attr, value)
