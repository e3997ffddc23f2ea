"""GPTQ (Frantar et al., 2022): column-by-column quantization with inverse-Hessian error compensation.

Each column's rounding error is spread onto the columns not yet quantized. For a layer with calibration
inputs ``X`` the loss ``||W X - Q X||^2`` has Hessian ``H = 2 X X^T`` (the same for every output row, so all
rows are processed at once). With ``U = chol(H^-1)^T`` (upper), quantizing column
``i`` to ``q_i`` spreads its error ``(w_i - q_i) / U_ii`` onto the later columns along row ``i`` of ``U``.
Updates are applied lazily: inside a block of ``block_size`` columns immediately, to the rest of the matrix
once per block (one matmul).

Options: ``damp`` (fraction of the mean diagonal added to ``H`` for a stable Cholesky; raised automatically if
it still fails), ``act_order`` (quantize columns by decreasing ``H_ii``, the most influential first; group
parameters are then fixed from the original weights beforehand, "static groups", so the stored layout needs
no column permutation), ``group_size``, ``sym``, ``clip_search`` (each group's range shrunk where that lowers
its error weighted by the Hessian diagonal).
"""

from __future__ import annotations

import numpy as np
import torch

from slimkit.engines.quantization.lowbit.gptq_columns import sweep_columns
from slimkit.engines.quantization.lowbit.linear import SCALE_DTYPE, n_groups, row_groups
from slimkit.engines.quantization.lowbit.packing import check_bits
from slimkit.engines.quantization.lowbit.rtn import group_mask, grouped, minmax_params, row_slices, search_params
from slimkit.errors import ConfigError


class HessianAccumulator:
    """Running ``H = 2/n * sum x x^T`` over the rows of every input batch seen by one layer."""

    def __init__(self, in_features: int, device: torch.device | str = "cpu") -> None:
        self.h = torch.zeros(in_features, in_features, dtype=torch.float32, device=device)
        self.count = 0

    def add(self, x: torch.Tensor) -> None:
        """Add a batch of inputs ``[..., in_features]``."""
        rows = x.detach().reshape(-1, x.shape[-1]).float()
        n = rows.shape[0]
        if n == 0:
            return
        total = self.count + n
        self.h.mul_(self.count / total)
        rows = rows * (2.0 / total) ** 0.5
        self.h.addmm_(rows.t(), rows)
        self.count = total


def factor_in_place(h: torch.Tensor) -> bool:
    """Whether ``H`` is factorised inside its own memory by LAPACK (a contiguous float32 CPU matrix) or by torch."""
    return h.device.type == "cpu" and h.dtype == torch.float32 and h.is_contiguous()


def _inverse_cholesky(box: list[torch.Tensor], damp: float) -> torch.Tensor:
    """Upper Cholesky factor of ``(H + damp * mean(diag H) * I)^-1``, raising the damping until it works.

    ``box`` holds ``H`` (float32, square) and is emptied. On the CPU the factor is computed inside ``H``'s own memory
    (:func:`_inverse_cholesky_in_place`): one ``[in, in]`` matrix alive instead of two (for a 14336-wide layer each
    is 822 MB), and LAPACK's factorisations are much faster there than torch's. Elsewhere (CUDA) torch's
    factorisations run with at most two such matrices alive at any time (:func:`_inverse_cholesky_torch`).
    """
    if factor_in_place(box[0]):
        return _inverse_cholesky_in_place(box.pop(), damp)
    return _inverse_cholesky_torch(box, damp)


def inverse_hessian_factor(h: torch.Tensor, damp: float = 0.01, overwrite: bool = False) -> torch.Tensor:
    """Upper Cholesky factor ``U`` of ``(H + damp * mean(diag H) * I)^-1`` (GPTQ's and SparseGPT's ``Hinv``).

    ``h`` is a float32 ``[in, in]`` Hessian; with ``overwrite`` it is used as the working buffer (on the CPU the
    factor is computed in its memory, see :func:`_inverse_cholesky`) instead of copied. The damping is raised
    automatically when the factorisation fails; a ConfigError when it never succeeds.
    """
    h = h.float()
    return _inverse_cholesky([h if overwrite else h.clone()], damp)


def _inverse_cholesky_torch(box: list[torch.Tensor], damp: float) -> torch.Tensor:
    """:func:`_inverse_cholesky` with torch's ops (any device), never more than two ``[in, in]`` matrices alive.

    With ``J`` the reversal of the index order and ``J H J = R R^T`` (``R`` lower), ``H^-1 = (J R^-1 J)^T (J R^-1 J)``
    and ``J R^-1 J`` is upper: it is the factor ``U``. So one Cholesky and one triangular solve written into an
    identity in place (no third matrix: ``cholesky_inverse`` followed by a second Cholesky holds three on CUDA,
    where cuSOLVER works on a copy of its input). ``H`` is dropped as soon as its factor exists.
    """
    h = box.pop().flip((0, 1))  # J H J; the caller's H is freed here (the box held the only reference)
    base = torch.diagonal(h).clone()
    diag_mean = float(base.mean())
    for attempt in range(8):
        torch.diagonal(h).copy_(base + _damping(damp, attempt, diag_mean))
        lower, info = torch.linalg.cholesky_ex(h)
        if int(info) != 0:
            del lower
            continue
        del h, base
        inverse = torch.eye(lower.shape[0], dtype=lower.dtype, device=lower.device)
        torch.linalg.solve_triangular(lower, inverse, upper=False, out=inverse)  # R^-1, in place of the identity
        del lower
        return inverse.flip((0, 1))
    raise _singular(damp)


def _damping(damp: float, attempt: int, diag_mean: float) -> float:
    return damp * (10**attempt) * max(diag_mean, 1e-8)


def _singular(damp: float) -> ConfigError:
    return ConfigError(
        f"GPTQ: the Hessian stays singular even with damp={damp * 10**7:g}; the calibration inputs are degenerate. "
        "Use more (or more varied) calibration samples."
    )


def _inverse_cholesky_in_place(h: torch.Tensor, damp: float) -> torch.Tensor:
    """:func:`_inverse_cholesky` without a second ``[in, in]`` matrix: LAPACK (``potrf``, ``potri``) inside ``h``.

    Seen column-major, ``h``'s memory is ``H`` again (it is symmetric) and LAPACK's lower triangle is ``h``'s upper
    one: the factor of ``H``, then ``H^-1``, then the factor ``U`` of ``H^-1`` are written there while ``h``'s
    strict lower triangle keeps ``H`` untouched, so a failed factorisation is retried with stronger damping from
    ``H`` restored (its upper triangle copied back from the lower, its diagonal from a saved copy). Returns ``h``
    holding ``U`` (the lower triangle zeroed).
    """
    from scipy.linalg import lapack

    base = torch.diagonal(h).clone()
    diag_mean = float(base.mean())
    column_major = h.numpy().T  # the same memory (no copy): LAPACK overwrites it in place

    def lapack_in_place(routine, **flags) -> bool:
        result, info = routine(column_major, lower=1, **flags)
        if not np.shares_memory(result, column_major):  # f2py copied after all: bring the result back
            np.copyto(column_major, result)
        return int(info) == 0

    # LAPACK's threads follow torch's: its results depend on their number, and a resumed streaming run must write
    # the same bytes as an uninterrupted one
    with _blas_threads().limit(limits=torch.get_num_threads(), user_api="blas"):
        for attempt in range(8):
            if attempt:
                _restore_upper(h)
            torch.diagonal(h).copy_(base + _damping(damp, attempt, diag_mean))
            if (lapack_in_place(lapack.spotrf, overwrite_a=1, clean=0)
                    and lapack_in_place(lapack.spotri, overwrite_c=1)
                    and lapack_in_place(lapack.spotrf, overwrite_a=1, clean=0)):
                return h.triu_()
    raise _singular(damp)


_CONTROLLER: list = []


def _blas_threads():
    """One ``threadpoolctl`` controller per process: building one scans every loaded library (~0.1 s per layer)."""
    if not _CONTROLLER:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0]


def _restore_upper(h: torch.Tensor, tile: int = 512) -> None:
    """Copy ``h``'s strict lower triangle onto its strict upper one, tile by tile (small temporaries)."""
    n = h.shape[0]
    for r in range(0, n, tile):
        rows = slice(r, min(r + tile, n))
        for c in range(r, n, tile):
            cols = slice(c, min(c + tile, n))
            below = h[cols, rows].t().clone()
            if c == r:
                upper = torch.ones_like(below, dtype=torch.bool).triu_(1)
                h[rows, cols][upper] = below[upper]
            else:
                h[rows, cols] = below


def _permute_(x: torch.Tensor, perm: torch.Tensor, rows: bool, band: int = 256) -> None:
    """``x = x[:, perm]`` (or ``x[perm]`` with ``rows``) in place: columns band by band, rows along their cycles."""
    if not rows:
        for r in range(0, x.shape[0], band):
            x[r : r + band] = x[r : r + band][:, perm]
        return
    order = perm.tolist()
    seen = bytearray(len(order))
    for start in range(len(order)):
        if seen[start] or order[start] == start:
            continue
        held, k = x[start].clone(), start
        while True:
            seen[k] = 1
            source = order[k]
            if source == start:
                x[k] = held
                break
            x[k] = x[source]
            k = source


def quantize_gptq(
    w: torch.Tensor,
    h: torch.Tensor,
    bits: int,
    group_size: int,
    sym: bool = False,
    act_order: bool = False,
    damp: float = 0.01,
    block_size: int = 128,
    clip_search: bool = True,
    overwrite_w: bool = False,
    overwrite_h: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GPTQ-quantize ``w [out, in]`` given Hessian ``h [in, in]``; returns codes, scales, zeros like RTN.

    With ``clip_search`` each group's range is shrunk where that lowers the Hessian-diagonal-weighted error.
    ``overwrite_w`` / ``overwrite_h`` let a float32 ``w`` / ``h`` be modified and freed here instead of copied
    (the caller hands over a buffer it keeps no other reference to): same result, less memory (for a 14336-wide
    layer each ``[in, in]`` copy is 822 MB).
    """
    check_bits(bits)
    maxq = float((1 << bits) - 1)
    out_f, in_f = w.shape
    if tuple(h.shape) != (in_f, in_f):
        raise ConfigError(f"GPTQ: Hessian shape {tuple(h.shape)} does not match a weight with {in_f} input features.")
    group_size = row_groups(group_size, in_f)
    device = w.device
    weight = w.detach().float()
    h = h.float()
    del w
    if not overwrite_w:
        weight = weight.clone()
    if not overwrite_h:
        h = h.clone()
    dead = torch.diagonal(h) == 0
    h[dead, dead] = 1.0
    weight[:, dead] = 0.0
    importance = torch.diagonal(h).clone()
    grid = 10 if clip_search else 1
    groups = n_groups(in_f, group_size)
    scales = torch.zeros(out_f, groups, device=device)
    zeros = torch.zeros(out_f, groups, device=device)
    perm = None
    if act_order:  # static groups: parameters from the original weights, before any error is spread
        s, z = search_params(grouped(weight, group_size), bits, sym, group_mask(in_f, group_size, device),
                             grouped(importance.unsqueeze(0), group_size), grid)
        scales.copy_(s)
        zeros.copy_(z)
        perm = torch.argsort(torch.diagonal(h), descending=True)
        _permute_(weight, perm, rows=False)  # in place: no second copy of either (h then rows too: P H P^T)
        _permute_(h, perm, rows=False)  # (no loop variable: it would keep this h alive past the gather below)
        if factor_in_place(h):  # along the cycles, a row at a time: a second [in, in] matrix may not fit
            _permute_(h, perm, rows=True)
        else:  # one gather instead of a launch per row; the old h is freed right after
            h = h.index_select(0, perm)
    box = [h]
    del h
    hinv = _inverse_cholesky(box, damp)
    codes_t = torch.empty(in_f, out_f, dtype=torch.uint8, device=device)  # transposed: one row per column
    for start in range(0, in_f, block_size):
        end = min(start + block_size, in_f)
        tile = weight[:, start:end].t().contiguous()  # [columns, out]: each column contiguous
        errors = torch.empty_like(tile)
        hblock = hinv[start:end, start:end]
        if perm is None:
            a = start
            while a < end:  # runs of columns that share a group
                g = a // group_size
                b = min(end, (g + 1) * group_size)
                lo = a - start
                if a % group_size == 0:  # the group's first column: its parameters from the weights as they are now
                    scales[:, g], zeros[:, g] = _group_params(tile[lo:], _past_block(weight, errors[:lo], hinv, start,
                                                                                     end, a + group_size - end),
                                                              a, group_size, in_f, bits, sym, importance, grid)
                sweep_columns(tile[lo:], hblock[lo:, lo:], scales[:, g].expand(b - a, out_f),
                              zeros[:, g].expand(b - a, out_f), codes_t[a:b], errors[lo:], b - a, maxq)
                a = b
        else:
            g = perm[start:end] // group_size
            sweep_columns(tile, hblock, scales[:, g].t(), zeros[:, g].t(), codes_t[start:end], errors,
                          end - start, maxq)
        for cols in row_slices(in_f - end, out_f):  # the lazy update in column slices: bounded temporaries
            lo, hi = end + cols.start, end + cols.stop
            weight[:, lo:hi].sub_(errors.t() @ hinv[start:end, lo:hi])
    if perm is not None:  # codes back in the weight's column order
        codes_t = codes_t[torch.argsort(perm)]
    return codes_t.t().contiguous(), scales.to(SCALE_DTYPE), zeros.to(SCALE_DTYPE)


def _past_block(weight: torch.Tensor, errors: torch.Tensor, hinv: torch.Tensor, start: int, end: int,
                width: int) -> torch.Tensor:
    """The first ``width`` columns after the block ``[start, end)`` with the errors spread so far in it applied.

    They receive the block's errors only in the lazy update; a group reaching past the block needs them now.
    """
    rest = weight[:, end : end + max(width, 0)]
    if rest.shape[1] == 0 or errors.shape[0] == 0:
        return rest
    return rest - errors.t() @ hinv[start : start + errors.shape[0], end : end + rest.shape[1]]


def _group_params(tile: torch.Tensor, rest: torch.Tensor, col: int, group_size: int, in_f: int, bits: int, sym: bool,
                  importance: torch.Tensor, grid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero ``[out]`` of the group starting at column ``col``, from its columns as they are now.

    ``tile`` holds the block's columns from ``col`` on (transposed), ``rest`` the columns after the block that the
    group reaches, up to date (:func:`_past_block`).
    """
    width = min(group_size, in_f - col)
    inside = min(width, tile.shape[0])
    w = torch.cat([tile[:inside].t(), rest[:, : width - inside]], dim=1) if inside < width else tile[:width].t()
    if grid == 1:
        return minmax_params(w, bits, sym)
    return search_params(w, bits, sym, importance=importance[col : col + width], grid=grid)
