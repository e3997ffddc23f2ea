"""What a weight quantizer handles: the one definition every quantizer (int8, low-bit, STE) and exporter shares.

A **target** is one module whose weights a quantizer replaces, of one of three kinds:

* ``"linear"``: ``nn.Linear`` and every subclass (Falcon's ``FalconLinear``, ...), weight ``[out, in]``;
* ``"conv1d"``: transformers' ``Conv1D`` (GPT-2 and its family), weight stored transposed, ``[in, out]``;
* ``"experts"``: a mixture-of-experts module holding its experts as 3-D parameters ``[E, out, in]`` (transformers
  5's ``MixtralExperts``, ``Qwen2MoeExperts``, ...); each expert is quantized on its own.

The **Linear-like parameters** of a model are the weights of all its targets. Coverage (:func:`coverage`) is
measured against them: every target a quantizer did not replace is listed with the reason, so a quantized model
never hides fp32 weights. Modules that look like a Linear but must stay (a ``Linear`` subclass whose parent
reads ``.weight`` directly, such as ``nn.MultiheadAttention.out_proj``) are targets of kind ``"linear"`` whose
:func:`unsupported_reason` says why no quantizer may swap them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from slimkit.core import experts as _experts
from slimkit.core.selection import matches

__all__ = [
    "CONV1D",
    "EXPERTS",
    "KINDS",
    "LINEAR",
    "Target",
    "conv1d_type",
    "coverage",
    "expert_params",
    "find_targets",
    "target_kind",
    "unsupported_reason",
    "weight_of",
]

LINEAR, CONV1D, EXPERTS = "linear", "conv1d", "experts"
KINDS: tuple[str, ...] = (LINEAR, CONV1D, EXPERTS)

#: Reasons a quantizer gives for a target it leaves (the ``reason`` field of a coverage entry starts with one).
EXCLUDED = "excluded by the user's pattern"
KEPT_BY_DESIGN = "kept by design"
UNSUPPORTED = "unsupported"


@functools.cache
def conv1d_type() -> type | None:
    """The ``Conv1D`` class of transformers, or None where transformers is missing."""
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # pragma: no cover - transformers is a dependency
        return None
    return Conv1D


def expert_params(module: nn.Module) -> tuple[str, ...]:
    """Names of ``module``'s own 3-D floating parameters ``[E, out, in]`` when it is an experts module, else ``()``.

    An experts module has ``num_experts`` and at least one 3-D parameter whose first dimension equals it.
    """
    n = getattr(module, "num_experts", None)
    if not isinstance(n, int) or n < 1:
        return ()
    names = tuple(name for name, p in module.named_parameters(recurse=False)
                  if p.dim() == 3 and p.shape[0] == n and p.is_floating_point())
    return names


def target_kind(module: nn.Module) -> str | None:
    """``"linear"``, ``"conv1d"``, ``"experts"`` or None: what kind of quantizer target ``module`` is."""
    conv1d = conv1d_type()
    if conv1d is not None and isinstance(module, conv1d):
        return CONV1D
    if isinstance(module, nn.Linear):
        return LINEAR
    if expert_params(module):
        return EXPERTS
    return None


def unsupported_reason(module: nn.Module, parent: nn.Module | None = None) -> str | None:
    """Why a target may not be swapped for a quantized module, or None when it may.

    ``nn.MultiheadAttention`` reads ``out_proj.weight`` itself (its ``out_proj`` is never called), so replacing
    that Linear would silently bypass the quantized layer. An experts module must have the layout slimkit's
    quantized experts reproduce (:func:`slimkit.core.experts.unsupported_reason`).
    """
    if parent is not None and isinstance(parent, nn.MultiheadAttention):
        return f"{UNSUPPORTED}: nn.MultiheadAttention reads its out_proj weight directly"
    if target_kind(module) == EXPERTS:  # layout, flags and one forward checked (slimkit.core.experts)
        return _experts.unsupported_reason(module)
    weight = getattr(module, "weight", None)
    if target_kind(module) in (LINEAR, CONV1D) and (not isinstance(weight, torch.Tensor)
                                                    or not weight.is_floating_point()):
        return f"{UNSUPPORTED}: its weight is not a floating-point tensor ({type(weight).__name__})"
    return None


def weight_of(module: nn.Module, param: str = "weight") -> torch.Tensor:
    """A target's weight in the ``[out, in]`` layout (``[E, out, in]`` for experts); a view, never a copy."""
    kind = target_kind(module)
    if kind == EXPERTS:
        return getattr(module, param)
    if kind == CONV1D:
        return module.weight.t()
    return module.weight


@dataclass(frozen=True)
class Target:
    """One module a weight quantizer may replace."""

    name: str  #: dotted module path
    kind: str  #: one of :data:`KINDS`
    params: tuple[str, ...]  #: the weight parameters: ``("weight",)`` or the experts' 3-D ones
    numel: int  #: weight elements (biases not counted)
    type_name: str  #: the module's class name, for messages
    unsupported: str | None = None  #: why no quantizer may swap it (see :func:`unsupported_reason`)


def find_targets(model: nn.Module, kinds: Iterable[str] = KINDS) -> list[Target]:
    """Every target of ``model`` of the given kinds, in module order (already-quantized layers are not targets)."""
    wanted = set(kinds)
    modules = dict(model.named_modules())
    found = []
    for name, module in modules.items():
        kind = target_kind(module)
        if not name or kind is None or kind not in wanted:
            continue
        params = expert_params(module) if kind == EXPERTS else ("weight",)
        numel = sum(getattr(module, p).numel() for p in params)
        parent = modules.get(name.rpartition(".")[0]) if "." in name else model
        found.append(Target(name, kind, params, numel, type(module).__name__, unsupported_reason(module, parent)))
    return found


@dataclass
class _Left:
    name: str
    params: int
    reason: str


@dataclass
class _Coverage:
    quantized: dict[str, int] = field(default_factory=dict)
    left: list[_Left] = field(default_factory=list)


def coverage(
    model_targets: Sequence[Target],
    quantized: Iterable[str],
    exclude: Sequence[str] = (),
    default_exclude: Sequence[str] = (),
    reasons: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The coverage record a quantizer stores with its result (JSON-ready).

    ``model_targets`` are the targets found *before* quantizing; ``quantized`` the names it replaced. Each other
    target gets a reason: ``reasons[name]`` when the quantizer gave one, else "kept by design" for a default
    exclusion the user did not change (``lm_head``), "excluded by the user's pattern" for the user's patterns,
    the target's unsupported reason, or "unsupported: <type> not handled by this quantizer".
    """
    done = set(quantized)
    reasons = dict(reasons or {})
    cov = _Coverage()
    for t in model_targets:
        if t.name in done:
            cov.quantized[t.name] = t.numel
            continue
        if t.name in reasons:
            why = reasons[t.name]
        elif t.unsupported:
            why = t.unsupported
        elif default_exclude and matches(t.name, default_exclude) and tuple(exclude) == tuple(default_exclude):
            why = f"{KEPT_BY_DESIGN} (default exclude {list(default_exclude)})"
        elif matches(t.name, exclude):
            why = f"{EXCLUDED} {[p for p in exclude if matches(t.name, [p])]}"
        else:
            why = f"{UNSUPPORTED}: {t.type_name} ({t.kind}) is not handled by this quantizer"
        cov.left.append(_Left(t.name, t.numel, why))
    total = sum(t.numel for t in model_targets)
    done_params = sum(cov.quantized.values())
    return {
        "quantized_layers": len(cov.quantized),
        "quantized_params": done_params,
        "linear_like_params": total,
        "share": round(done_params / total, 6) if total else 0.0,
        "left": [{"name": x.name, "params": x.params, "reason": x.reason} for x in cov.left],
    }
