"""What a quantizer quantizes (:class:`QuantType`) and how gradients cross the rounding (:class:`QuantGrad`).

Rounding has a zero gradient almost everywhere, so quantization-aware training replaces it in the backward
pass. :class:`QuantGrad` runs a quantizer's ``quantize_*`` method in its forward (outside autograd) and
calls :meth:`QuantGrad.quant_backward` in its backward: by default the straight-through estimator (the
incoming gradient passes unchanged). Subclasses override ``quant_backward``; :class:`ClipGrad` zeroes the
gradient where the input fell outside the quantizer's clamp range.
"""

from __future__ import annotations

import functools
import inspect
from enum import Enum
from typing import Any, Protocol

import torch


class QuantType(str, Enum):
    """The tensors of a layer a quantizer can quantize; equal to the strings used in ``quant_types``."""

    INPUT = "input"
    WEIGHT = "weight"
    OUTPUT = "output"
    # NNI's spellings are aliases of the same members.
    QUANT_INPUT = "input"
    QUANT_WEIGHT = "weight"
    QUANT_OUTPUT = "output"

    def __str__(self) -> str:
        return self.value


class QuantizerLike(Protocol):
    """What a wrapper and :class:`QuantGrad` need from a quantizer (a ``Quantizer``)."""

    def quantize(self, tensor: torch.Tensor, quant_type: QuantType, wrapper: Any) -> torch.Tensor:
        """Quantize ``tensor`` of ``wrapper``'s layer (through the quantizer's gradient class)."""
        ...

    def dispatch(self, tensor: torch.Tensor, quant_type: QuantType, wrapper: Any) -> torch.Tensor:
        """Run the quantizer's ``quantize_<type>`` method on ``tensor``."""
        ...


class QuantTarget(Protocol):
    """What :class:`QuantGrad` reads from the layer it quantizes (a ``QuantizerModuleWrapper``)."""

    quantizer: QuantizerLike

    def qparams(self, quant_type: QuantType | str) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The layer's current ``(scale, zero_point)`` for ``quant_type``."""
        ...

    def bits(self, quant_type: QuantType | str) -> int:
        """The layer's bit width for ``quant_type``."""
        ...


def round_ste(x: torch.Tensor) -> torch.Tensor:
    """``round(x)`` in the forward pass, identity in the backward pass (straight-through)."""
    return x + (torch.round(x) - x).detach()


def grad_scale(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``x`` in the forward pass; the gradient reaching ``x`` is multiplied by ``scale`` (LSQ's step scaling)."""
    return (x - x * scale).detach() + x * scale


@functools.lru_cache(maxsize=64)
def _positional_arity(function: Any) -> int:
    params = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return 7
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


class QuantGrad(torch.autograd.Function):
    """Autograd function around a quantizer's ``quantize_*``: forward quantizes, backward is overridable.

    Call ``QuantGrad.apply(tensor, quant_type, wrapper)`` (the wrapper does this). The forward reads the
    affine parameters the quantizer left on the wrapper (``<type>_scale`` / ``<type>_zero_point``) and keeps
    them for :meth:`quant_backward`, together with the integer range ``[0, 2**bits - 1]``.
    """

    @staticmethod
    def quant_backward(
        tensor: torch.Tensor,
        grad_output: torch.Tensor,
        quant_type: QuantType,
        scale: torch.Tensor | None,
        zero_point: torch.Tensor | None,
        qmin: int,
        qmax: int,
    ) -> torch.Tensor:
        """Gradient for the quantizer's input; the default is the straight-through estimator.

        ``tensor`` is the unquantized input, ``grad_output`` the gradient of the quantized output.
        ``scale``/``zero_point`` are ``None`` when the quantizer records no affine parameters. An override
        with the older three-argument signature ``(tensor, grad_output, quant_type)`` also works.
        """
        return grad_output

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, tensor: torch.Tensor, quant_type: QuantType, wrapper: QuantTarget
    ) -> torch.Tensor:
        """Quantize ``tensor`` with the wrapper's quantizer and remember what the backward needs."""
        quant_type = QuantType(quant_type)
        output = wrapper.quantizer.dispatch(tensor, quant_type, wrapper)
        scale, zero_point = wrapper.qparams(quant_type)
        ctx.save_for_backward(tensor, scale, zero_point)
        ctx.quant_type = quant_type
        ctx.qmax = 2 ** wrapper.bits(quant_type) - 1
        return output

    @classmethod
    def backward(cls, ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        """Delegate to :meth:`quant_backward` of the class ``apply`` was called on."""
        tensor, scale, zero_point = ctx.saved_tensors
        grad = grad_output.clone()
        if _positional_arity(cls.quant_backward) <= 3:
            result = cls.quant_backward(tensor, grad, ctx.quant_type)
        else:
            result = cls.quant_backward(tensor, grad, ctx.quant_type, scale, zero_point, 0, ctx.qmax)
        return result, None, None


class ClipGrad(QuantGrad):
    """Straight-through inside the clamp range, zero gradient outside it (what fake-quantization training uses).

    An input element is outside when ``round(x / scale + zero_point)`` falls below ``qmin`` or above ``qmax``:
    the clamp made the output constant there, so its true gradient is zero.
    """

    @staticmethod
    def quant_backward(
        tensor: torch.Tensor,
        grad_output: torch.Tensor,
        quant_type: QuantType,
        scale: torch.Tensor | None,
        zero_point: torch.Tensor | None,
        qmin: int,
        qmax: int,
    ) -> torch.Tensor:
        """Zero the gradient where the input was clamped."""
        if scale is None or zero_point is None:
            return grad_output
        q = torch.round(tensor / scale + zero_point)
        return grad_output.masked_fill((q < qmin) | (q > qmax), 0.0)
