"""The fused int4 GEMM in Triton for :class:`PackedLinear` on CUDA (2 to 512 rows, float16/bfloat16 activations).

Same weight layout as the GEMV (:mod:`.triton_int4`): ``[BLOCK_M, BLOCK_K]`` activation tiles times the dequantised
weight tile through ``tl.dot`` with a float32 accumulator, either the ``[BLOCK_K, BLOCK_N]`` tile unpacked at once
(each word read for its eight rows, from L1) or, ``planes``, eight dots of ``K = BLOCK_K / 8``, one per nibble,
each word loaded once. The weight is read as int4, never written dense.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from slimkit.engines.quantization.lowbit.triton_int4 import AVAILABLE, TritonWeight
from slimkit.engines.quantization.lowbit.triton_launch import DirectLaunch

if AVAILABLE:
    import triton
    import triton.language as tl

#: row counts per GEMM configuration that keep a direct launcher (decode batches, repeated prompt lengths)
MAX_LAUNCHERS = 32


@dataclass(frozen=True)
class Gemm:
    """Tile sizes and pipeline depth of the fused GEMM."""

    block_m: int
    block_n: int
    block_k: int
    warps: int = 4
    stages: int = 3
    #: eight ``tl.dot`` per tile, one per nibble, each word loaded once (else one dot on the full unpacked tile)
    planes: bool = False

    @property
    def name(self) -> str:
        """Candidate name in the dispatch table, e.g. ``gemm_m16_n64_k128_w4_s3`` (``gemmp_`` for planes)."""
        kind = "gemmp" if self.planes else "gemm"
        return f"{kind}_m{self.block_m}_n{self.block_n}_k{self.block_k}_w{self.warps}_s{self.stages}"


def gemm_configs(rows: int) -> tuple[Gemm, ...]:
    """GEMM candidates for ``rows`` activation rows (a row bucket): ``BLOCK_M`` just covers small buckets."""
    bm = min(max(16, 1 << (max(rows, 1) - 1).bit_length()), 64)
    configs = [Gemm(bm, 32, 128, stages=4), Gemm(bm, 64, 128), Gemm(bm, 64, 128, planes=True),
               Gemm(bm, 128, 128, planes=True)]
    if rows >= 128:
        configs.append(Gemm(128, 128, 64, warps=8))
    return tuple(configs)


if AVAILABLE:

    @triton.jit
    def _gemm_kernel(x_ptr, w_ptr, s_ptr, m_ptr, b_ptr, y_ptr, M, N, K, ITERS, stride_xm, stride_ym,
                     GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     HAS_BIAS: tl.constexpr):
        pid_m = tl.program_id(0)  # row blocks vary fastest: programs sharing a weight tile run together (L2)
        pid_n = tl.program_id(1)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = n < N
        rk = tl.arange(0, BLOCK_K)
        shift = (rk % 8) * 4
        acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
        for i in range(0, ITERS):
            k0 = i * BLOCK_K
            kk = k0 + rk
            a = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K),
                        other=0.0)
            words = tl.load(w_ptr + (kk // 8)[:, None] * N + n[None, :], mask=n_ok[None, :], other=0)
            q = (((words >> shift[:, None]) & 0xF) | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0
            g = k0 // GROUP
            s = tl.load(s_ptr + g * N + n, mask=n_ok, other=0.0).to(tl.float32)
            m = tl.load(m_ptr + g * N + n, mask=n_ok, other=0.0).to(tl.float32)
            w = (q * s[None, :] + m[None, :]).to(a.dtype)
            acc = tl.dot(a, w, acc)
        if HAS_BIAS:
            acc += tl.load(b_ptr + n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        mask = (rm[:, None] < M) & n_ok[None, :]
        tl.store(y_ptr + rm[:, None] * stride_ym + n[None, :], acc.to(y_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _gemm_planes_kernel(x_ptr, w_ptr, s_ptr, m_ptr, b_ptr, y_ptr, M, N, K, ITERS, stride_xm, stride_ym,
                            GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            HAS_BIAS: tl.constexpr):
        # each int32 word loaded once; eight tl.dot of K = BLOCK_K / 8, one per nibble (input rows 8 * ri + j)
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = n < N
        ri = tl.arange(0, BLOCK_K // 8)
        acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
        for i in range(0, ITERS):
            k0 = i * BLOCK_K
            words = tl.load(w_ptr + (k0 // 8 + ri)[:, None] * N + n[None, :], mask=n_ok[None, :], other=0)
            g = (k0 + ri * 8) // GROUP
            s = tl.load(s_ptr + g[:, None] * N + n[None, :], mask=n_ok[None, :], other=0.0).to(tl.float32)
            m = tl.load(m_ptr + g[:, None] * N + n[None, :], mask=n_ok[None, :], other=0.0).to(tl.float32)
            for j in tl.static_range(8):
                kj = k0 + ri * 8 + j
                a = tl.load(x_ptr + rm[:, None] * stride_xm + kj[None, :],
                            mask=(rm[:, None] < M) & (kj[None, :] < K), other=0.0)
                q = (((words >> (4 * j)) & 0xF) | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0
                acc = tl.dot(a, (q * s + m).to(a.dtype), acc)
        if HAS_BIAS:
            acc += tl.load(b_ptr + n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        mask = (rm[:, None] < M) & n_ok[None, :]
        tl.store(y_ptr + rm[:, None] * stride_ym + n[None, :], acc.to(y_ptr.dtype.element_ty), mask=mask)

    #: the kernels by name (tests swap in interpreted copies to run them on a CPU)
    KERNELS = {"gemm": _gemm_kernel, "gemm_planes": _gemm_planes_kernel}
else:  # pragma: no cover - depends on the install
    KERNELS = {}


def gemm_fn(tw: TritonWeight, cfg: Gemm) -> Callable[[torch.Tensor], torch.Tensor]:
    """``fn(x [M, K]) -> x @ W^T (+ bias)`` as ``[M, N]`` in ``x.dtype`` (float16/bfloat16, rows contiguous)."""
    block_k = cfg.block_k if cfg.planes else min(cfg.block_k, tw.group)  # a tile of the plain kernel: one group
    iters = tw.words.shape[0] * 8 // block_k
    kernel, n, k = KERNELS["gemm_planes" if cfg.planes else "gemm"], tw.out_features, tw.in_features
    weights = (tw.words, tw.scales, tw.mins, tw.scales if tw.bias is None else tw.bias)
    consts = dict(GROUP=tw.group, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=block_k,
                  HAS_BIAS=tw.bias is not None)  # in the kernel's parameter order
    options = {"num_warps": cfg.warps, "num_stages": cfg.stages}
    n_blocks = triton.cdiv(n, cfg.block_n)
    launchers: dict[int, DirectLaunch] = {}  # per row count: the grid and Triton's specialisation of M differ

    def run(x: torch.Tensor) -> torch.Tensor:
        m = x.shape[0]
        y = torch.empty(m, n, dtype=x.dtype, device=x.device)
        launch = launchers.get(m)
        if launch is None:
            if len(launchers) >= MAX_LAUNCHERS:
                launchers.clear()
            launch = launchers[m] = DirectLaunch(kernel, (triton.cdiv(m, cfg.block_m), n_blocks), consts, options,
                                                 varying=(0, 5), out=5)
        launch(x, *weights, y, m, n, k, iters, k, n)  # rows of x are contiguous: stride K
        return y

    return run


def gemm(x: torch.Tensor, tw: TritonWeight, cfg: Gemm) -> torch.Tensor:
    """One call of :func:`gemm_fn` (tests, benchmarks)."""
    return gemm_fn(tw, cfg)(x)
