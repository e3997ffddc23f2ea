"""What slimkit's quantized MoE experts modules share: the experts forward contract, routing, MAC count, selection.

A quantized experts module replaces a transformers experts module (``MixtralExperts``, ``Qwen2MoeExperts``...,
see :mod:`slimkit.core.experts`) and keeps its contract exactly: ``forward(hidden_states [T, H],
top_k_index [T, K], top_k_weights [T, K]) -> [T, H]``, with the attributes the parent MoE block may read
(``num_experts``, ``hidden_dim``, ``intermediate_dim``, ``act_fn``). Subclasses store each expert's two
projections quantized and implement :meth:`QuantizedExperts.project` (one expert, one projection, the tokens
routed to it); the routing loop and the gate are shared with the float reference
(:func:`slimkit.core.experts.moe_forward`), so on the same weights the results are the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from slimkit.core.experts import ExpertsLayout, dense_weights, expert_activation, experts_layout, moe_forward
from slimkit.core.experts import unsupported_reason as experts_unsupported
from slimkit.core.weights import EXPERTS
from slimkit.errors import ConfigError, ModelNotSupportedError

FIRST, DOWN = "first", "down"


class QuantizedExperts(nn.Module):
    """Base of the quantized experts modules: the routing, the gate, the MAC count; subclasses store the weights."""

    def __init__(self, layout: ExpertsLayout, act_fn: Callable) -> None:
        super().__init__()
        self.num_experts = layout.num_experts
        self.hidden_dim = layout.hidden
        self.intermediate_dim = layout.intermediate
        self.gated = layout.gated
        self.act_fn = act_fn

    @property
    def layout(self) -> ExpertsLayout:
        """The experts' shapes (the same as the module this one replaced)."""
        return ExpertsLayout(self.num_experts, self.hidden_dim, self.intermediate_dim, self.gated)

    def shapes(self) -> dict[str, tuple[int, int]]:
        """``{projection: (out, in)}`` of one expert's weights."""
        lay = self.layout
        return {FIRST: (lay.first_rows, lay.hidden), DOWN: (lay.hidden, lay.intermediate)}

    def buffer_prefix(self, which: str) -> str:
        """State-dict name prefix of a projection: the replaced module's parameter name (``gate_up_proj``...)."""
        return self.layout.first if which == FIRST else "down_proj"

    def project(self, expert: int, which: str, x: torch.Tensor) -> torch.Tensor:
        """``x [n, in] @ W^T`` for projection ``which`` (``"first"`` or ``"down"``) of expert ``expert``."""
        raise NotImplementedError

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        """Expert ``e`` on the tokens routed to it: ``down(act(gate) * up)`` (or ``down(act(up))``)."""
        return self.project(e, DOWN, expert_activation(self.layout, self.act_fn, self.project(e, FIRST, x)))

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        """The experts layer: each token's top-k experts, weighted by ``top_k_weights`` and summed."""
        shape = hidden_states.shape
        flat = hidden_states.reshape(-1, self.hidden_dim)
        out = moe_forward(flat, top_k_index.reshape(flat.shape[0], -1), top_k_weights.reshape(flat.shape[0], -1),
                          self.num_experts, self.expert)
        return out.view(shape)

    def macs_label(self) -> str:
        """The arithmetic this module's MACs run in (``"int8"``, ``"int4 weights"``...)."""
        raise NotImplementedError

    def call_macs(self, args: tuple, output: Any) -> tuple[str, int]:
        """``(label, MACs)`` of one call on ``args = (hidden_states, top_k_index, top_k_weights)``.

        Each routed (token, expert) pair costs both projections, ``(rows of the first + I) * H``; pairs routed to
        no expert (indices outside ``[0, num_experts)``) cost nothing. For :mod:`slimkit.evaluation`'s counters.
        """
        index = args[1] if len(args) > 1 else None
        if not isinstance(index, torch.Tensor):
            return self.macs_label(), 0
        pairs = int(((index >= 0) & (index < self.num_experts)).sum())
        return self.macs_label(), pairs * self.layout.macs_per_pair()

    def extra_repr(self) -> str:
        """Experts, widths and gate in ``print(model)``."""
        return (f"num_experts={self.num_experts}, hidden_dim={self.hidden_dim}, "
                f"intermediate_dim={self.intermediate_dim}, gated={self.gated}")


def layout_from_spec(spec: dict[str, Any]) -> ExpertsLayout:
    """The :class:`ExpertsLayout` recorded in a replay spec."""
    return ExpertsLayout(int(spec["num_experts"]), int(spec["hidden"]), int(spec["intermediate"]),
                         bool(spec["gated"]))


def layout_spec(layout: ExpertsLayout) -> dict[str, Any]:
    """The JSON-able part of a replay spec that records the layout (``kind`` marks it as experts)."""
    return {"kind": EXPERTS, "num_experts": layout.num_experts, "hidden": layout.hidden,
            "intermediate": layout.intermediate, "gated": layout.gated}


def is_experts_spec(spec: Any) -> bool:
    """Whether a replay spec describes an experts module (else a dense layer)."""
    return isinstance(spec, dict) and spec.get("kind") == EXPERTS


def saved_experts(model: nn.Module, specs: dict[str, dict]) -> list[tuple[str, dict, nn.Module]]:
    """``(name, spec, module)`` for each experts spec in ``specs``, the module being the rebuilt model's experts.

    A name the rebuilt model lacks, or a module there without ``act_fn``, is a ConfigError (another architecture).
    """
    found = []
    for name, spec in specs.items():
        if not is_experts_spec(spec):
            continue
        try:
            old = model.get_submodule(name)
        except AttributeError as exc:
            raise ConfigError(f"The saved model quantized the experts {name!r}, which the rebuilt model does not "
                              "have; pass the same architecture that was smashed.") from exc
        if not hasattr(old, "act_fn"):
            raise ConfigError(f"The saved model quantized the experts {name!r}; the rebuilt model's {name} is a "
                              f"{type(old).__name__} without act_fn. Pass the same architecture that was smashed.")
        found.append((name, spec, old))
    return found


def float_dtype(module: nn.Module) -> torch.dtype:
    """The float dtype of a module's first floating parameter (float32 when it has none)."""
    return next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)


def require_layout(module: nn.Module, name: str) -> ExpertsLayout:
    """The module's :class:`ExpertsLayout`, or a ModelNotSupportedError saying why it has none."""
    layout = experts_layout(module)
    if layout is None:
        raise ModelNotSupportedError(f"{name}: {experts_unsupported(module) or 'not an experts module'}.")
    return layout


def replace_experts(model: nn.Module, name: str, make: Callable[[nn.Module, ExpertsLayout], QuantizedExperts],
                    quantize: Callable[[torch.Tensor], tuple]) -> dict[str, Any]:
    """Swap experts module ``name`` for ``make(module, layout)`` filled by ``set_expert(*quantize(weight))``.

    ``quantize`` runs on each projection of each expert; returns the new module's replay spec.
    """
    module = model.get_submodule(name)
    layout = require_layout(module, name)
    new = make(module, layout)
    for which, weight in zip((FIRST, DOWN), dense_weights(module, layout), strict=True):
        weight = weight.detach()
        for e in range(layout.num_experts):
            new.set_expert(which, e, *quantize(weight[e]))
    model.set_submodule(name, new.train(module.training))
    return new.spec()
