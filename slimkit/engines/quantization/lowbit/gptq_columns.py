"""GPTQ's inner column sweep: quantize a run of columns one by one, spreading each one's error onto the next ones.

The sweep works on one block of columns held transposed, ``tile [n, out]`` (row ``c`` is column ``c`` of the weight,
contiguous), with the block's part of the inverse-Hessian factor ``h [n, n]``. For ``c < count`` it computes

    q_c = clamp(round(w_c / s_c + z_c), 0, maxq)          err_c = (w_c - (q_c - z_c) * s_c) / h[c, c]
    w_j -= err_c * h[c, j]   for every later column j < n of the block

writing ``q_c`` to ``codes[c]`` (uint8) and ``err_c`` to ``errors[c]``. ``scales`` / ``zeros`` are ``[count, out]``
(broadcast views are fine: one group's parameters for every column). Rows (output channels) are independent, so:

- on CUDA with Triton, one kernel launch sweeps the whole run: each program keeps a band of rows of the tile in
  registers for all ``count`` columns (one launch per block instead of ~10 per column). IEEE division and
  round-half-to-even match torch's; the first call is checked against the torch loop, and on any error or
  mismatch the loop is used for the rest of the process (``SLIMKIT_GPTQ_TRITON=0`` turns the kernel off);
- elsewhere, a torch loop of ten in-place ops per column on contiguous rows (the CPU path).
"""

from __future__ import annotations

import os
import warnings

import torch

try:  # Triton ships with CUDA builds of PyTorch; CPU-only installs have none and use the torch loop
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the installed torch
    triton = None

_STATE: dict[str, bool] = {}


def sweep_columns(tile: torch.Tensor, h: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
                  codes: torch.Tensor, errors: torch.Tensor, count: int, maxq: float) -> None:
    """Quantize columns ``0..count-1`` of ``tile [n, out]`` in place (module doc); fills ``codes`` and ``errors``."""
    if count <= 0:
        return
    if tile.is_cuda and triton_ready():
        if _STATE.get("checked"):
            _sweep_triton(tile, h, scales, zeros, codes, errors, count, maxq)
            return
        if _first_triton_call(tile, h, scales, zeros, codes, errors, count, maxq):
            return
    _sweep_torch(tile, h, scales, zeros, codes, errors, count, maxq)


def triton_ready() -> bool:
    """Whether the fused CUDA sweep may be used (Triton importable, not turned off, not disabled by a failed check)."""
    return triton is not None and os.environ.get("SLIMKIT_GPTQ_TRITON", "1") != "0" and not _STATE.get("disabled")


def _sweep_torch(tile, h, scales, zeros, codes, errors, count, maxq) -> None:
    n = tile.shape[0]
    for c in range(count):
        column, s, z, err = tile[c], scales[c], zeros[c], errors[c]
        q = torch.div(column, s).add_(z).round_().clamp_(0, maxq)
        codes[c].copy_(q)
        torch.sub(column, q.sub_(z).mul_(s), out=err).div_(h[c, c])
        if c + 1 < n:
            tile[c + 1 :].addr_(h[c, c + 1 : n], err, alpha=-1)


def _first_triton_call(tile, h, scales, zeros, codes, errors, count, maxq) -> bool:
    """Run the kernel once against the torch loop on copies; keep it only if the codes agree. True when it ran."""
    reference = [t.clone() for t in (tile, codes, errors)]
    _sweep_torch(reference[0], h, scales, zeros, reference[1], reference[2], count, maxq)
    try:
        _sweep_triton(tile, h, scales, zeros, codes, errors, count, maxq)
        agree = float((codes[:count] == reference[1][:count]).float().mean())
    except Exception as exc:  # noqa: BLE001 - any compile/launch failure: fall back to the loop for good
        _disable(f"the fused GPTQ column kernel failed ({type(exc).__name__}: {exc})")
    else:
        if agree >= 0.99:
            _STATE["checked"] = True
            return True
        _disable(f"the fused GPTQ column kernel disagrees with the torch loop ({agree:.1%} of codes equal)")
    for target, source in zip((tile, codes, errors), reference, strict=True):
        target.copy_(source)
    return True


def _disable(why: str) -> None:
    _STATE["disabled"] = True
    warnings.warn(f"{why}; using the per-column torch loop.", RuntimeWarning, stacklevel=4)


#: output rows per program of the fused kernel (a band of the tile kept in registers)
BAND_ROWS = 16


def _sweep_triton(tile, h, scales, zeros, codes, errors, count, maxq) -> None:
    n, out_f = tile.shape
    width = triton.next_power_of_2(n)
    grid = (triton.cdiv(out_f, BAND_ROWS),)
    _sweep_kernel[grid](tile, h, scales, zeros, codes, errors, out_f, n, count, float(maxq),
                        tile.stride(0), tile.stride(1), h.stride(0), h.stride(1), scales.stride(0), scales.stride(1),
                        zeros.stride(0), zeros.stride(1), codes.stride(0), codes.stride(1),
                        errors.stride(0), errors.stride(1), WIDTH=width, ROWS=BAND_ROWS, num_warps=4)


if triton is not None:

    @triton.jit
    def _round_half_even(x):
        low = tl.floor(x)
        frac = x - low  # exact: 0 <= frac < 1
        odd = (low - 2.0 * tl.floor(low * 0.5)) != 0.0
        up = (frac > 0.5) | ((frac == 0.5) & odd)
        return tl.where(up, low + 1.0, low)

    @triton.jit
    def _sweep_kernel(tile_ptr, h_ptr, s_ptr, z_ptr, q_ptr, e_ptr, out_f, n, count, maxq,
                      st_c, st_r, sh_r, sh_c, ss_c, ss_r, sz_c, sz_r, sq_c, sq_r, se_c, se_r,
                      WIDTH: tl.constexpr, ROWS: tl.constexpr):
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, WIDTH)
        live = rows < out_f
        inside = live[:, None] & (cols[None, :] < n)
        offsets = rows[:, None].to(tl.int64) * st_r + cols[None, :].to(tl.int64) * st_c
        band = tl.load(tile_ptr + offsets, mask=inside, other=0.0)  # [ROWS, WIDTH]: these rows of every column
        for c in range(0, WIDTH):  # a constant trip count; columns from `count` on change nothing
            run = live & (c < count)
            w = tl.sum(tl.where(cols[None, :] == c, band, 0.0), axis=1)
            s = tl.load(s_ptr + c * ss_c + rows * ss_r, mask=run, other=1.0)
            z = tl.load(z_ptr + c * sz_c + rows * sz_r, mask=run, other=0.0)
            q = tl.minimum(tl.maximum(_round_half_even(tl.math.div_rn(w, s) + z), 0.0), maxq)
            d = tl.load(h_ptr + c * sh_r + c * sh_c, mask=c < count, other=1.0)
            deq = (q - z) * s
            err = tl.where(run, tl.math.div_rn(w - deq, d), 0.0)
            tl.store(q_ptr + c * sq_c + rows * sq_r, q.to(tl.uint8), mask=run)
            tl.store(e_ptr + c * se_c + rows * se_r, err, mask=run)
            hrow = tl.load(h_ptr + c * sh_r + cols * sh_c, mask=(cols > c) & (cols < n) & (c < count), other=0.0)
            band = band - err[:, None] * hrow[None, :]
        tl.store(tile_ptr + offsets, band, mask=inside)
