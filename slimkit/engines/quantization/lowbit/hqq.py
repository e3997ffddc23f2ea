"""Half-Quadratic Quantization (HQQ): data-free optimisation of each group's zero point (and scale).

HQQ (Badri & Shaji, 2023) fits the quantization parameters to a sparsity-promoting ``l_p`` loss (``p < 1``) of
the weight error instead of the mean squared error, so a few outlier weights do not drag every other weight
of the group away from its level. The non-convex problem is split with an auxiliary error variable ``E``
(half-quadratic splitting) and solved by alternating two closed forms per group:

1. ``E <- shrink_p(W - W_r, beta)``: generalised soft-thresholding of the current residual,
   ``sign(r) * max(|r| - |r|^(p-1) / beta, 0)``;
2. ``z <- mean(q - (W - E) / s)`` (and, with ``optimize_scale``, the least-squares scale
   ``s <- <W - E, q - z> / <q - z, q - z>``), where ``q = clamp(round(W / s + z))`` and ``W_r = (q - z) * s``.

``beta`` grows by ``kappa`` each step; the parameters with the lowest ``l_p`` error seen are kept. No
calibration data is needed.
"""

from __future__ import annotations

import torch

from slimkit.engines.quantization.lowbit.linear import SCALE_DTYPE, row_groups
from slimkit.engines.quantization.lowbit.packing import check_bits
from slimkit.engines.quantization.lowbit.rtn import (
    ROW_CHUNK_ELEMENTS,
    group_mask,
    grouped,
    minmax_params,
    row_slices,
    storable_scale,
)


def shrink_lp(x: torch.Tensor, beta: float, p: float) -> torch.Tensor:
    """Generalised soft-thresholding, the proximal step of ``|x|^p`` with weight ``1 / beta``."""
    mag = x.abs()
    return torch.sign(x) * torch.relu(mag - mag.clamp(min=1e-12).pow(p - 1) / beta)


def _lp_error(w: torch.Tensor, w_r: torch.Tensor, mask: torch.Tensor, p: float) -> torch.Tensor:
    """Per-(row, group) ``sum |w - w_r|^p`` over the real columns."""
    return ((w - w_r).abs().pow(p) * mask).sum(-1)


def quantize_hqq(
    w: torch.Tensor,
    bits: int,
    group_size: int,
    iters: int = 20,
    p: float = 0.7,
    beta: float = 10.0,
    kappa: float = 1.01,
    optimize_scale: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize ``w [out, in]``; returns codes uint8 ``[out, in]``, scales and fractional zeros ``[out, n_groups]``."""
    maxq = float((1 << check_bits(bits)) - 1)
    out_f, in_f = w.shape
    group_size = row_groups(group_size, in_f)
    if w.numel() > ROW_CHUNK_ELEMENTS and out_f > 1:  # a slice of rows at a time: bounded temporaries, same result
        parts = [quantize_hqq(w[rows], bits, group_size, iters, p, beta, kappa, optimize_scale)
                 for rows in row_slices(out_f, in_f)]
        return tuple(torch.cat(t) for t in zip(*parts, strict=True))  # type: ignore[return-value]
    wg = grouped(w.detach().float(), group_size)
    mask = group_mask(in_f, group_size, w.device).to(wg.dtype)
    count = mask.sum(-1).clamp(min=1)
    scale, zero = minmax_params(wg, bits, sym=False, mask=mask.bool())
    scale, zero = scale.unsqueeze(-1), zero.unsqueeze(-1)

    def codes(s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.clamp(torch.round(wg / s + z), 0, maxq)

    best_s, best_z = scale.clone(), zero.clone()
    best_err = _lp_error(wg, (codes(scale, zero) - zero) * scale, mask, p)
    for _ in range(iters):
        q = codes(scale, zero)
        e = shrink_lp(wg - (q - zero) * scale, beta, p)
        target = (wg - e) * mask
        zero = ((q - target / scale) * mask).sum(-1, keepdim=True) / count.unsqueeze(-1)
        if optimize_scale:
            centred = (q - zero) * mask
            denom = (centred * centred).sum(-1, keepdim=True)
            fitted = (target * centred).sum(-1, keepdim=True) / denom.clamp(min=1e-12)
            scale = torch.where((denom > 0) & (fitted > 0), fitted, scale)
        beta *= kappa
        err = _lp_error(wg, (codes(scale, zero) - zero) * scale, mask, p)
        better = err < best_err
        best_err = torch.where(better, err, best_err)
        best_s = torch.where(better.unsqueeze(-1), scale, best_s)
        best_z = torch.where(better.unsqueeze(-1), zero, best_z)
    scale = storable_scale(best_s)
    zero = best_z.to(SCALE_DTYPE).float()
    q = codes(scale, zero).reshape(out_f, -1)[:, :in_f].to(torch.uint8)
    return q, scale.squeeze(-1).to(SCALE_DTYPE), zero.squeeze(-1).to(SCALE_DTYPE)
