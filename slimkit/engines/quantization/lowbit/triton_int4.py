"""int4 weight-only matmul in Triton for :class:`PackedLinear` on CUDA: the weight layout and the decode GEMV.

Why our own kernels: PyTorch's tinygemm (``_weight_int4pack_mm``) is only ~1.2x dense bf16 at one row on an H200
and slower from 8 rows on, and no maintained Marlin-class library ships a wheel for every torch ABI we run on
(a wheel built against another torch fails to load). Triton ships with CUDA builds of torch, so these kernels need
nothing extra, and the Triton interpreter (``TRITON_INTERPRET=1``) runs them on a CPU for the correctness tests.

Weight layout (built once per layer by :func:`prepare`, never per call): codes below 16 (2, 3 and 4-bit layers
alike) as nibbles of int32 words ``[Kp // 8, N]``: word ``(i, n)`` holds output ``n``'s codes of input rows
``8i .. 8i+7``, row ``8i + j`` in bits ``4j .. 4j+3`` (``Kp`` is ``K`` padded to :data:`K_ALIGN` with zero codes;
the input is masked there, so padding never reaches the sum). Scales and mins are float16 ``[Kp // G, N]`` with
``w = q * s + m`` (``m = -z * s``), ``G`` a divisor of the layer's group size, a multiple of 8 (a word's eight
rows share a group).

- :func:`gemv` (1 to 8 rows): each program owns ``BLOCK_N`` outputs and walks ``K`` in ``BLOCK_K`` tiles; each int32
  word is loaded once and its eight nibbles are taken in turn (nibble ``j`` of word row ``r`` is input row
  ``8r + j``), accumulating ``s * sum(x * q) + m * sum(x)`` per word row in float32. The codes become floats
  without an int-to-float conversion (``(q | 0x4B000000)`` read as float32 is ``2**23 + q``: one OR and one
  subtraction, full rate). ``SPLIT_K > 1`` splits ``K`` over more programs (atomic adds into a float32 row): more
  memory traffic in flight for layers with few outputs, at the price of a zero fill and a cast.
- :func:`.triton_gemm.gemm` (2 to 512 rows, half precision): the fused dequantise + ``tl.dot`` GEMM, same layout.

Which kernel and tile sizes run for a layer shape and row count is measured on the machine (:mod:`.int4_dispatch`);
:data:`GEMV_CONFIGS`/:func:`gemv_configs` and :func:`.triton_gemm.gemm_configs` are the candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import gcd

import torch

from slimkit.engines.quantization.lowbit.triton_launch import DirectLaunch

try:  # Triton comes with CUDA builds of torch; without it the CUDA path uses tinygemm and the dense fallback
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None

#: True when Triton imports (the kernels below exist)
AVAILABLE = triton is not None
#: ``K`` is padded to a multiple of this (every ``BLOCK_K * SPLIT_K`` divides it)
K_ALIGN = 512
#: largest scale group the kernels use; a layer's groups are split into ``gcd(group_size, MAX_GROUP)`` columns
MAX_GROUP = 128
#: smallest such group (``tl.dot`` needs ``BLOCK_K >= 16``)
MIN_GROUP = 16
#: 2**23 as float32: ``(q | 0x4B000000)`` bit-cast to float32 equals ``MAGIC + q`` for ``q < 2**23``
MAGIC = 8388608.0


@dataclass(frozen=True)
class Gemv:
    """Tile sizes of the one-row kernel."""

    block_n: int
    block_k: int
    split_k: int = 1
    warps: int = 4
    #: activation rows one program takes (a power of two; each dequantised word serves all of them)
    rows: int = 1

    def __post_init__(self) -> None:
        if K_ALIGN % (self.block_k * self.split_k):
            raise ValueError(f"block_k * split_k must divide K_ALIGN={K_ALIGN}; got {self.block_k} * {self.split_k}.")

    @property
    def name(self) -> str:
        """Candidate name in the dispatch table, e.g. ``gemv_n32_k128_s1_w4`` (``gemv4_...`` for 4 rows)."""
        rows = "" if self.rows == 1 else str(self.rows)
        return f"gemv{rows}_n{self.block_n}_k{self.block_k}_s{self.split_k}_w{self.warps}"


#: largest row bucket the GEMV kernel takes (above it the GEMM's tensor cores win)
MAX_GEMV_ROWS = 8
#: one-row candidates: wide tiles (coalesced, few programs) to narrow ones and split K (many programs)
GEMV_CONFIGS = (Gemv(32, 256), Gemv(64, 128), Gemv(16, 256, warps=2), Gemv(32, 128, split_k=4),
                Gemv(64, 256, split_k=2))


def gemv_configs(rows: int) -> tuple[Gemv, ...]:
    """GEMV candidates for a bucket of ``rows`` (1 to :data:`MAX_GEMV_ROWS`): smaller K tiles as rows grow."""
    if rows == 1:
        return GEMV_CONFIGS
    bk = 128 if rows <= 2 else 64
    return (Gemv(32, bk, rows=rows), Gemv(64, bk, rows=rows), Gemv(32, bk, split_k=4, rows=rows))


def kernel_group(group_size: int) -> int | None:
    """The scale group the kernels use for a layer of ``group_size`` (a divisor of it), or ``None`` if too small."""
    g = gcd(group_size, MAX_GROUP)
    return g if g >= MIN_GROUP else None


@dataclass
class TritonWeight:
    """A layer's weight in the kernels' layout (see the module doc)."""

    words: torch.Tensor  # int32 [Kp // 8, N]
    scales: torch.Tensor  # float16 [Kp // group, N]
    mins: torch.Tensor  # float16 [Kp // group, N]
    bias: torch.Tensor | None
    in_features: int
    out_features: int
    group: int


def prepare(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int,
            bias: torch.Tensor | None) -> TritonWeight:
    """Repack ``codes [N, K]`` (< 16) with per-group ``scales``/``zeros [N, groups]`` into :class:`TritonWeight`."""
    n, k = codes.shape
    group = kernel_group(group_size)
    if group is None:
        raise ValueError(f"group_size={group_size} has no divisor >= {MIN_GROUP} that divides {MAX_GROUP}.")
    kp = -(-k // K_ALIGN) * K_ALIGN
    q = torch.zeros(kp, n, dtype=torch.int32, device=codes.device)
    q[:k] = codes.t().to(torch.int32)
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=codes.device)
    words = (q.view(kp // 8, 8, n) << shifts.view(1, 8, 1)).sum(1, dtype=torch.int32)  # disjoint bits: sum == OR
    rep = group_size // group
    s = scales.float().repeat_interleave(rep, dim=1)
    m = -zeros.float().repeat_interleave(rep, dim=1) * s
    rows = kp // group
    table = torch.zeros(2, rows, n, dtype=torch.float32, device=codes.device)
    used = min(rows, s.shape[1])
    table[0, :used], table[1, :used] = s.t()[:used], m.t()[:used]
    table = table.to(torch.float16)
    return TritonWeight(words.contiguous(), table[0].contiguous(), table[1].contiguous(),
                        None if bias is None else bias.detach(), k, n, group)


if AVAILABLE:
    # builtins and the standard sum combiner only: the kernels then also run under an in-process interpreter that a
    # test starts after Triton was imported (``tl.sum``/``tl.zeros`` are jit helpers bound at import time)
    _add = tl.standard._sum_combine

    @triton.jit
    def _gemv_kernel(x_ptr, w_ptr, s_ptr, m_ptr, b_ptr, y_ptr, M, N, K, ITERS,
                     GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
                     ROWS: tl.constexpr, HAS_BIAS: tl.constexpr):
        pid_n = tl.program_id(0)
        pid_k = tl.program_id(1)
        n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = n < N
        rr = tl.arange(0, ROWS)  # all rows share each dequantised word: the weight is read once for them
        r_ok = rr < M
        ri = tl.arange(0, BLOCK_K // 8)  # word rows of the tile: each int32 word is loaded once
        acc = tl.full((ROWS, BLOCK_K // 8, BLOCK_N), 0.0, tl.float32)
        for i in range(0, ITERS):  # a host-side count: the interpreter cannot take a tensor as a range bound
            k0 = (i * SPLIT_K + pid_k) * BLOCK_K
            words = tl.load(w_ptr + (k0 // 8 + ri)[:, None] * N + n[None, :], mask=n_ok[None, :], other=0)
            g = (k0 + ri * 8) // GROUP
            s = tl.load(s_ptr + g[:, None] * N + n[None, :], mask=n_ok[None, :], other=0.0).to(tl.float32)
            m = tl.load(m_ptr + g[:, None] * N + n[None, :], mask=n_ok[None, :], other=0.0).to(tl.float32)
            qx = tl.full((ROWS, BLOCK_K // 8, BLOCK_N), 0.0, tl.float32)
            xs = tl.full((ROWS, BLOCK_K // 8), 0.0, tl.float32)
            for j in tl.static_range(8):  # nibble j of every word: input rows k0 + 8 * ri + j
                kj = k0 + ri * 8 + j
                xj = tl.load(x_ptr + rr[:, None] * K + kj[None, :], mask=r_ok[:, None] & (kj[None, :] < K),
                             other=0.0).to(tl.float32)
                q = (((words >> (4 * j)) & 0xF) | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0
                qx += q[None, :, :] * xj[:, :, None]
                xs += xj
            acc += qx * s[None, :, :] + xs[:, :, None] * m[None, :, :]
        y = tl.reduce(acc, 1, _add)
        if HAS_BIAS:
            if pid_k == 0:
                y += tl.load(b_ptr + n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        out = y_ptr + rr[:, None] * N + n[None, :]
        if SPLIT_K == 1:
            tl.store(out, y.to(y_ptr.dtype.element_ty), mask=r_ok[:, None] & n_ok[None, :])
        else:
            tl.atomic_add(out, y, mask=r_ok[:, None] & n_ok[None, :])

    #: the kernels by name (tests swap in interpreted copies to run them on a CPU)
    KERNELS = {"gemv": _gemv_kernel}
else:  # pragma: no cover - depends on the install
    KERNELS = {}


def gemv_fn(tw: TritonWeight, cfg: Gemv) -> Callable[[torch.Tensor], torch.Tensor]:
    """``fn(x [M, K]) -> x @ W^T (+ bias)`` as ``[M, N]`` in ``x.dtype`` for ``M <= cfg.rows`` (rows contiguous).

    Grid, launcher and constants are fixed here, so a call is one allocation and one launch (plus a zero fill and
    a cast when ``K`` is split), made directly after the first (:class:`.triton_launch.DirectLaunch`).
    """
    iters = tw.words.shape[0] * 8 // (cfg.block_k * cfg.split_k)
    weights = (tw.words, tw.scales, tw.mins, tw.scales if tw.bias is None else tw.bias)
    n, k = tw.out_features, tw.in_features
    consts = dict(GROUP=tw.group, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, SPLIT_K=cfg.split_k, ROWS=cfg.rows,
                  HAS_BIAS=tw.bias is not None)  # in the kernel's parameter order (the direct launch passes them so)
    grid = (triton.cdiv(n, cfg.block_n), cfg.split_k)
    launchers: dict[int, DirectLaunch] = {}  # per row count (Triton specialises M == 1)

    def launch(x: torch.Tensor, y: torch.Tensor) -> None:
        m = x.shape[0]
        if m > cfg.rows:
            raise ValueError(f"{cfg.name} takes at most {cfg.rows} rows; got {m}.")
        if m not in launchers:
            launchers[m] = DirectLaunch(KERNELS["gemv"], grid, consts, {"num_warps": cfg.warps}, varying=(0, 5), out=5)
        launchers[m](x, *weights, y, m, n, k, iters)

    if cfg.split_k == 1:
        def run(x: torch.Tensor) -> torch.Tensor:
            y = torch.empty(x.shape[0], n, dtype=x.dtype, device=x.device)
            launch(x, y)
            return y
    else:
        def run(x: torch.Tensor) -> torch.Tensor:
            y = torch.zeros(x.shape[0], n, dtype=torch.float32, device=x.device)
            launch(x, y)
            return y.to(x.dtype)
    return run


def gemv(x: torch.Tensor, tw: TritonWeight, cfg: Gemv) -> torch.Tensor:
    """One call of :func:`gemv_fn` (tests, benchmarks)."""
    return gemv_fn(tw, cfg)(x)
