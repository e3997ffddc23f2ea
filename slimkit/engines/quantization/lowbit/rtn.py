"""Round-to-nearest (RTN) group-wise quantization: the baseline every other low-bit method is measured against.

For each (row, group) of a weight ``[out, in]``:

- asymmetric: ``s = (max - min) / (2**bits - 1)``, ``z = round(-min / s)``, codes ``q = clamp(round(w / s) + z)``;
- symmetric: ``s = 2 * max|w| / (2**bits - 1)``, ``z = 2**(bits - 1)`` (the same zero for every group).

Scales are rounded to float16 (their storage type) *before* the codes are computed, so the stored model
reproduces exactly what was optimised.
"""

from __future__ import annotations

import torch

from slimkit.engines.quantization.lowbit.linear import SCALE_DTYPE, SCALE_MIN, n_groups, row_groups
from slimkit.engines.quantization.lowbit.packing import check_bits

#: a weight with more elements than this is quantized a slice of rows at a time: every step here works per row, so
#: the result is the same, and the temporaries of a 14336 x 4096 matrix stay near this size (float32: 64 MB)
ROW_CHUNK_ELEMENTS = 2**24


def row_slices(rows: int, row_elements: int) -> list[slice]:
    """Slices of ``rows`` holding at most :data:`ROW_CHUNK_ELEMENTS` elements each (at least one row)."""
    step = max(1, ROW_CHUNK_ELEMENTS // max(row_elements, 1))
    return [slice(i, min(i + step, rows)) for i in range(0, rows, step)]


def storable_scale(scale: torch.Tensor) -> torch.Tensor:
    """``scale`` rounded to its float16 storage type (kept within float16's range), returned as float32."""
    return scale.clamp(SCALE_MIN, 65504.0).to(SCALE_DTYPE).float()


def grouped(w: torch.Tensor, group_size: int) -> torch.Tensor:
    """View ``w [out, in]`` as ``[out, n_groups, group_size]``, zero-padding a partial last group."""
    out_f, in_f = w.shape
    groups = n_groups(in_f, group_size)
    if groups * group_size != in_f:
        w = torch.nn.functional.pad(w, (0, groups * group_size - in_f))
    return w.reshape(out_f, groups, group_size)


def group_mask(in_features: int, group_size: int, device: torch.device | None = None) -> torch.Tensor:
    """Boolean ``[n_groups, group_size]``: True for real columns, False for the padding of a partial group."""
    groups = n_groups(in_features, group_size)
    return (torch.arange(groups * group_size, device=device) < in_features).view(groups, group_size)


def _extremes(w: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row ``min(w, 0)`` and ``max(w, 0)`` over the last dim (``mask`` marks the entries to consider)."""
    w = w.float()
    if mask is None:
        wmin, wmax = w.amin(dim=-1), w.amax(dim=-1)
    else:
        wmin = w.masked_fill(~mask, float("inf")).amin(dim=-1)
        wmax = w.masked_fill(~mask, float("-inf")).amax(dim=-1)
    return wmin.clamp(max=0), wmax.clamp(min=0)  # keep 0 representable


def _range_params(wmin: torch.Tensor, wmax: torch.Tensor, bits: int, sym: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero of the range ``[wmin, wmax]`` (``wmin <= 0 <= wmax``)."""
    maxq = (1 << bits) - 1
    if sym:
        absmax = torch.maximum(-wmin, wmax)
        scale = storable_scale(2 * absmax / maxq)
        zero = torch.full_like(scale, float(1 << (bits - 1)))
    else:
        scale = storable_scale((wmax - wmin) / maxq)
        zero = torch.round(-wmin / scale).clamp(0, maxq)
    return scale, zero


def minmax_params(
    w: torch.Tensor, bits: int, sym: bool, mask: torch.Tensor | None = None, shrink: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero for the last dim of ``w`` (any leading shape); ``mask`` marks the entries to consider.

    ``shrink < 1`` narrows the range to ``shrink * [min, max]`` (values outside are clipped to the end codes).
    """
    wmin, wmax = _extremes(w, mask)
    return _range_params(wmin * shrink, wmax * shrink, check_bits(bits), sym)


def search_params(
    w: torch.Tensor,
    bits: int,
    sym: bool,
    mask: torch.Tensor | None = None,
    importance: torch.Tensor | None = None,
    grid: int = 10,
    min_shrink: float = 0.7,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Like :func:`minmax_params`, but with each group's range shrunk to minimise its weighted squared error.

    The shrink factor is searched in ``[min_shrink, 1]`` (``grid`` steps) for the lowest
    ``sum importance * (w - dequant(quant(w)))^2`` over the group. ``importance`` broadcasts against ``w`` (e.g.
    the Hessian diagonal or the mean squared activation of each input column); clipping a few extreme weights
    buys a finer grid for all the others.
    """
    if w.dim() > 1 and w.numel() > ROW_CHUNK_ELEMENTS and w.shape[0] > 1:  # bounded temporaries, same result
        imp = None if importance is None else importance.expand_as(w)
        parts = [search_params(w[rows], bits, sym, mask, None if imp is None else imp[rows], grid, min_shrink)
                 for rows in row_slices(w.shape[0], w[0].numel())]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    if grid <= 1:  # nothing to search: the full range (no error buffers of w's size)
        return _range_params(*_extremes(w, mask), check_bits(bits), sym)
    w = w.float()
    weight = None if importance is None else importance.expand_as(w)
    if mask is not None:
        weight = mask.expand_as(w).float() if weight is None else weight * mask
    maxq = float((1 << check_bits(bits)) - 1)
    wmin, wmax = _extremes(w, mask)  # once: every grid step only scales them
    best_s, best_z = _range_params(wmin, wmax, bits, sym)
    best_err = None
    for step in range(grid):
        shrink = 1.0 - (1.0 - min_shrink) * step / max(grid - 1, 1)
        scale, zero = _range_params(wmin * shrink, wmax * shrink, bits, sym)
        s, z = scale.unsqueeze(-1), zero.unsqueeze(-1)
        # (w - dequant(quant(w)))^2 * weight in one buffer: the ops of quantize_codes / dequantize_codes, in place
        err = (w / s).add_(z).round_().clamp_(0, maxq).sub_(z).mul_(s).sub_(w).square_()
        err = (err if weight is None else err.mul_(weight)).sum(-1)
        if best_err is None:
            best_err = err
            continue
        better = err < best_err
        best_err = torch.where(better, err, best_err)
        best_s, best_z = torch.where(better, scale, best_s), torch.where(better, zero, best_z)
    return best_s, best_z


def quantize_codes(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    """Codes ``clamp(round(w / s + z), 0, 2**bits - 1)``; ``scale``/``zero`` broadcast against ``w``."""
    maxq = (1 << bits) - 1
    return torch.clamp(torch.round(w.float() / scale + zero), 0, maxq)


def dequantize_codes(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """``(q - z) * s`` in float32."""
    return (q.float() - zero) * scale


def quantize_rtn(
    w: torch.Tensor,
    bits: int,
    group_size: int,
    sym: bool = False,
    importance: torch.Tensor | None = None,
    grid: int = 1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize ``w [out, in]`` group-wise: returns codes uint8 ``[out, in]``, scales and zeros ``[out, n_groups]``.

    ``grid > 1`` searches a clipping range per group (see :func:`search_params`), weighting each input column's
    squared error by ``importance [in]`` when given. ``group_size=-1``: one group per row (per-channel).
    """
    out_f, in_f = w.shape
    group_size = row_groups(group_size, in_f)
    if w.numel() > ROW_CHUNK_ELEMENTS and out_f > 1:  # a slice of rows at a time: bounded temporaries, same result
        parts = [quantize_rtn(w[rows], bits, group_size, sym, importance, grid) for rows in row_slices(out_f, in_f)]
        return tuple(torch.cat(t) for t in zip(*parts, strict=True))  # type: ignore[return-value]
    wg = grouped(w.float(), group_size)
    mask = group_mask(in_f, group_size, w.device)
    if grid > 1:
        weights = None if importance is None else grouped(importance.float().view(1, -1), group_size)
        scale, zero = search_params(wg, bits, sym, mask, weights, grid)
    else:
        scale, zero = minmax_params(wg, bits, sym, mask)
    q = quantize_codes(wg, scale.unsqueeze(-1), zero.unsqueeze(-1), bits)
    q = q.reshape(out_f, -1)[:, :in_f].to(torch.uint8)
    return q, scale.to(SCALE_DTYPE), zero.to(SCALE_DTYPE)


def fake_quantize(w: torch.Tensor, bits: int, group_size: int, sym: bool = False,
                  importance: torch.Tensor | None = None, grid: int = 1) -> torch.Tensor:
    """Quantize then dequantize ``w`` (float32, same shape): what the packed layer will compute with."""
    out_f, in_f = w.shape
    group_size = row_groups(group_size, in_f)
    q, scale, zero = quantize_rtn(w, bits, group_size, sym, importance, grid)
    deq = dequantize_codes(grouped(q, group_size), scale.float().unsqueeze(-1), zero.float().unsqueeze(-1))
    return deq.reshape(out_f, -1)[:, :in_f]
