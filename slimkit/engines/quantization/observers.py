"""Affine quantization arithmetic and the range observers quantizers use to pick scales.

Every quantizer in this package expresses its result in one affine form, so exports and frozen layers
handle them all alike: integer codes ``q`` in ``[0, 2**bits - 1]`` with

    q = clamp(round(x / scale + zero_point), 0, 2**bits - 1)        x_hat = (q - zero_point) * scale

``scale`` and ``zero_point`` are float tensors broadcastable to ``x`` (one value, or one per output channel
of a weight: shape ``[C, 1, ...]``). ``zero_point`` may be fractional (DoReFa's symmetric grid, BNN's +-1).
"""

from __future__ import annotations

import torch

_EPS = 1e-8


def qmax_for(bits: int) -> int:
    """Largest integer code for ``bits`` (codes are unsigned: ``[0, 2**bits - 1]``)."""
    return 2**bits - 1


def channel_view(values: torch.Tensor, ndim: int) -> torch.Tensor:
    """Reshape per-channel ``values`` ``[C]`` to ``[C, 1, ...]`` so they broadcast over a tensor of ``ndim`` dims."""
    return values.reshape(-1, *([1] * (ndim - 1)))


def channel_min_max(tensor: torch.Tensor, per_channel: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Min and max of ``tensor`` overall (shape ``[1]``) or per slice of dim 0 (shape ``[C, 1, ...]``)."""
    t = tensor.detach()
    if per_channel and t.dim() > 1:
        flat = t.reshape(t.shape[0], -1)
        return channel_view(flat.min(dim=1).values, t.dim()), channel_view(flat.max(dim=1).values, t.dim())
    return t.min().reshape(1), t.max().reshape(1)


def affine_qparams(low: torch.Tensor, high: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and integer zero point that map ``[low, high]`` (widened to include 0) onto ``[0, 2**bits - 1]``.

    Including 0 makes zero exactly representable (zero padding, ReLU outputs). A degenerate range gets a
    tiny positive scale instead of dividing by zero.
    """
    qmax = qmax_for(bits)
    low = torch.clamp(low.detach().float(), max=0.0)
    high = torch.clamp(high.detach().float(), min=0.0)
    scale = torch.clamp((high - low) / qmax, min=_EPS)
    zero_point = torch.clamp(torch.round(-low / scale), 0, qmax)
    return scale, zero_point


def symmetric_qparams(low: torch.Tensor, high: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero point of a symmetric grid ``[-a, a]``, ``a = max(|low|, |high|)``, centred on ``2**(bits-1)``.

    In slimkit's unsigned codes this is NNI's ``*_symmetric`` scheme for both ``int`` (zero point 0, shifted
    by ``2**(bits-1)``) and ``uint`` (zero point ``2**(bits-1)``) dtypes.
    """
    half = (qmax_for(bits)) / 2.0
    bound = torch.maximum(low.detach().float().abs(), high.detach().float().abs())
    scale = torch.clamp(bound / half, min=_EPS)
    return scale, torch.full_like(scale, float(2 ** (bits - 1)))


def code_range(scale: torch.Tensor, zero_point: torch.Tensor, bits: int) -> tuple[float, float]:
    """The real interval the codes of ``(scale, zero_point)`` cover: NNI's ``tracked_min`` / ``tracked_max``."""
    low = ((0 - zero_point) * scale).min()
    high = ((qmax_for(bits) - zero_point) * scale).max()
    return float(low), float(high)


def quantize_codes(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, bits: int) -> torch.Tensor:
    """Integer codes of ``x`` (as floats) in ``[0, 2**bits - 1]``; no gradient."""
    return torch.clamp(torch.round(x / scale + zero_point), 0, qmax_for(bits))


def dequantize(codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor) -> torch.Tensor:
    """Real values of integer ``codes``: ``(codes - zero_point) * scale``."""
    return (codes.to(scale.dtype) - zero_point) * scale


def fake_quantize(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, bits: int) -> torch.Tensor:
    """Quantize then dequantize ``x`` (no gradient path; wrap it in a QuantGrad for training)."""
    return dequantize(quantize_codes(x, scale, zero_point, bits), scale, zero_point).to(x.dtype)
