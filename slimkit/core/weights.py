"""What a weight quantizer handles: the one definition every quantizer (int8, low-bit, STE) and exporter shares.

A **target** is one module whose weights a quantizer replaces, of one of three kinds:

* ``"linear"``: ``nn.Linear`` and every subclass (Falcon's ``FalconLinear``, ...), weight ``[out, in]``;
* ``"conv1d"``: transformers' ``Conv1D`` (GPT-2 and its family), weight stored transposed, ``[in, out]``;
* ``"experts"``: a mixture-of-experts module holding its experts as 3-D parameters ``[E, out, in]`` (transformers
  5's ``MixtralExperts``, ``Qwen2MoeExperts``, ...); each expert is quantized on its own.

The **Linear-like parameters** of a model are the weights of all its targets. Coverage
(:func:`slimkit.core.coverage.coverage`) is
measured against them: every target a quantizer did not replace is listed with the reason, so a quantized model
never hides fp32 weights. Modules that look like a Linear but must stay (a ``Linear`` subclass whose parent
reads ``.weight`` directly, such as ``nn.MultiheadAttention.out_proj``, or a subclass whose ``forward`` is not
``x W^T + b``) are targets of kind ``"linear"`` whose :func:`unsupported_reason` says why no quantizer may swap them.

A Linear subclass (or a ``Conv1D`` subclass) is swapped only when a cheap probe (:func:`linear_probe`: its
``forward`` on a small seeded random input against ``F.linear``) shows it computes ``x W^T + b``; Falcon's
``FalconLinear`` does, Llama 4's router (a Linear returning top-k scores) does not.

Quantizers pick their targets with :func:`select` (kinds passed explicitly); :mod:`slimkit.core.coverage` holds
the record of what they took and left (``coverage``) and the refusal that names the types found (``refusal``).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.core import experts as _experts
from slimkit.core.selection import matches

__all__ = [
    "CONV1D",
    "DENSE",
    "EXCLUDED",
    "EXPERTS",
    "FALLBACK",
    "KEPT_BY_DESIGN",
    "KINDS",
    "LINEAR",
    "UNSUPPORTED",
    "Target",
    "conv1d_type",
    "expert_params",
    "find_targets",
    "linear_probe",
    "select",
    "target_kind",
    "unsupported_reason",
    "weight_of",
]

LINEAR, CONV1D, EXPERTS = "linear", "conv1d", "experts"
KINDS: tuple[str, ...] = (LINEAR, CONV1D, EXPERTS)
#: The 2-D kinds: what a quantizer of dense layers handles.
DENSE: tuple[str, ...] = (LINEAR, CONV1D)

#: Reasons a quantizer gives for a target it leaves (the ``reason`` field of a coverage entry starts with one).
EXCLUDED = "excluded by the user's pattern"
KEPT_BY_DESIGN = "kept by design"
UNSUPPORTED = "unsupported"
FALLBACK = "kept in full precision by the fidelity fallback"


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
    return tuple(name for name, p in module.named_parameters(recurse=False)
                 if p.dim() == 3 and p.shape[0] == n and p.is_floating_point())


def target_kind(module: nn.Module) -> str | None:
    """``"linear"``, ``"conv1d"``, ``"experts"`` or None: what kind of quantizer target ``module`` is."""
    conv1d = conv1d_type()
    if conv1d is not None and isinstance(module, conv1d):
        return CONV1D if isinstance(getattr(module, "weight", None), torch.Tensor) else None
    if isinstance(module, nn.Linear):  # a frozen-quantized layer may have given its weight away: not a target
        return LINEAR if isinstance(getattr(module, "weight", None), torch.Tensor) else None
    if expert_params(module):
        return EXPERTS
    return None


_PROBED: weakref.WeakKeyDictionary[nn.Module, tuple[tuple, str | None]] = weakref.WeakKeyDictionary()


def linear_probe(module: nn.Module) -> str | None:
    """Why ``module``'s ``forward`` is not ``x W^T + b`` (None when it is): one call on a small random input.

    Only subclasses are probed (``nn.Linear`` and ``Conv1D`` themselves are known); a module on the ``meta``
    device cannot run and is trusted. The input is seeded, two rows in the weight's dtype and device; the output
    must be a tensor of the right shape within a dtype-sized tolerance of ``F.linear``. Results are cached per
    module until its weight changes.
    """
    conv1d = conv1d_type()
    if type(module) is nn.Linear or (conv1d is not None and type(module) is conv1d):
        return None
    weight = weight_of(module)
    if weight.device.type == "meta":
        return None
    key = (weight.data_ptr(), weight._version, module.training)
    cached = _PROBED.get(module)
    if cached is not None and cached[0] == key:
        return cached[1]
    reason = _probe(module, weight)
    _PROBED[module] = (key, reason)
    return reason


def _probe(module: nn.Module, weight: torch.Tensor) -> str | None:
    kind = type(module).__name__
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, weight.shape[1], generator=gen).to(device=weight.device, dtype=weight.dtype)
    bias = getattr(module, "bias", None)
    try:
        with torch.no_grad():
            out = module.forward(x)
            ref = F.linear(x, weight, bias if isinstance(bias, torch.Tensor) else None)
    except Exception as exc:  # any failure means "not a plain linear map on [N, in]"
        return f"{UNSUPPORTED}: {kind}.forward is not x W^T + b (it raised {type(exc).__name__} on a [2, in] input)"
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return f"{UNSUPPORTED}: {kind}.forward is not x W^T + b (returned {got}, expected {tuple(ref.shape)})"
    tol = 1e-4 if weight.dtype in (torch.float32, torch.float64) else 2e-2
    err = float((out.float() - ref.float()).abs().max())
    scale = float(ref.float().abs().max()) + 1e-6
    if not err <= tol * scale:
        return (f"{UNSUPPORTED}: {kind}.forward is not x W^T + b (relative difference {err / scale:.3g} on a "
                "random input)")
    return None


def unsupported_reason(module: nn.Module, parent: nn.Module | None = None) -> str | None:
    """Why a target may not be swapped for a quantized module, or None when it may.

    ``nn.MultiheadAttention`` reads ``out_proj.weight`` itself (its ``out_proj`` is never called), so replacing
    that Linear would silently bypass the quantized layer. A weight that is not floating point is already
    quantized by someone else. A Linear or Conv1D subclass must pass :func:`linear_probe`. An experts module must
    have the layout slimkit's quantized experts reproduce (:func:`slimkit.core.experts.unsupported_reason`).
    """
    if parent is not None and isinstance(parent, nn.MultiheadAttention):
        return f"{UNSUPPORTED}: nn.MultiheadAttention reads its out_proj weight directly"
    kind = target_kind(module)
    if kind == EXPERTS:  # layout, flags and one forward checked (slimkit.core.experts)
        return _experts.unsupported_reason(module)
    if kind not in DENSE:
        return None
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point() or weight.dim() != 2:
        what = f"{weight.dtype}, {weight.dim()}-D" if isinstance(weight, torch.Tensor) else type(weight).__name__
        return f"{UNSUPPORTED}: its weight is not a 2-D floating-point tensor ({what})"
    return linear_probe(module)


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


def select(targets: Sequence[Target], kinds: Iterable[str], exclude: Sequence[str] = ()) -> list[Target]:
    """The targets a quantizer handling ``kinds`` takes: of those kinds, supported, not named by ``exclude``."""
    wanted = set(kinds)
    return [t for t in targets if t.kind in wanted and not t.unsupported and not matches(t.name, exclude)]
