"""Large weights are quantized in row slices and GPTQ hands its Hessian over: less memory, the same numbers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from slimkit.engines.quantization.lowbit import gptq, hqq, rtn

ROOT = Path(__file__).resolve().parents[4]


def _problem(seed=0, out_f=96, in_f=200):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(out_f, in_f, generator=gen)
    x = torch.randn(400, in_f, generator=gen)
    return w, 2 * x.t() @ x / 400, torch.rand(in_f, generator=gen)


def _all(w, h, importance):
    return {
        "rtn": rtn.quantize_rtn(w, 4, 64),
        "rtn clip search": rtn.quantize_rtn(w, 3, 32, False, importance, 10),
        "hqq": hqq.quantize_hqq(w, 4, 64, iters=4),
        "gptq act order": gptq.quantize_gptq(w, h, 4, 64, act_order=True),
        "gptq in order": gptq.quantize_gptq(w, h, 4, 64, act_order=False, block_size=32),
        "gptq sym 3-bit": gptq.quantize_gptq(w, h, 3, 32, sym=True, act_order=False),
    }


def test_row_slices_give_the_same_codes_scales_and_zeros(monkeypatch):
    w, h, importance = _problem()
    whole = _all(w, h, importance)
    monkeypatch.setattr(rtn, "ROW_CHUNK_ELEMENTS", 1000)  # a few rows (or columns) at a time everywhere
    assert rtn.row_slices(96, 200) == [slice(i, min(i + 5, 96)) for i in range(0, 96, 5)]
    sliced = _all(w, h, importance)
    for name in whole:
        assert all(torch.equal(a, b) for a, b in zip(whole[name], sliced[name], strict=True)), name


@pytest.mark.parametrize("act_order", [True, False])
def test_handing_the_hessian_and_weight_over_gives_the_same_result(act_order):
    w, h, _ = _problem(1)
    expected = gptq.quantize_gptq(w, h, 4, 64, act_order=act_order)
    w2, h2 = w.clone(), h.clone()
    got = gptq.quantize_gptq(w2, h2, 4, 64, act_order=act_order, overwrite_w=True, overwrite_h=True)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))


def test_a_hessian_that_needs_more_damping_still_factorises():
    w, _, _ = _problem(2, in_f=64)
    x = torch.randn(8, 64)  # rank 8 of 64: the plain Cholesky fails without enough damping
    h = 2 * x.t() @ x / 8
    q, s, z = gptq.quantize_gptq(w, h, 4, 32, damp=1e-9, act_order=False)
    assert q.shape == w.shape and torch.isfinite(s.float()).all()


def _spd(n, seed=3, rank=None):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rank or 2 * n, n, generator=gen)
    return 2 * x.t() @ x / x.shape[0]


def _one_negative_eigenvalue(n=96):
    """Eigenvalues in [1, 10] and one at -0.05: damp 0.005 fails first (adds ~0.03), then 10x that works."""
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=torch.Generator().manual_seed(4), dtype=torch.float64))
    values = torch.linspace(1, 10, n, dtype=torch.float64)
    values[0] = -0.05
    return ((q * values) @ q.t()).float().contiguous()


@pytest.mark.parametrize("case", ["positive definite", "needs more damping"])
def test_the_in_place_inverse_factor_matches_torch(case, monkeypatch):
    h, damp = (_spd(96), 0.01) if case == "positive definite" else (_one_negative_eigenvalue(), 0.005)
    restored = []
    real = gptq._restore_upper
    monkeypatch.setattr(gptq, "_restore_upper", lambda m: restored.append(1) or real(m, tile=40))
    expected = gptq._inverse_cholesky_torch([h.clone()], damp)
    buffer = h.clone()
    got = gptq._inverse_cholesky([buffer], damp)
    assert got.data_ptr() == buffer.data_ptr()  # computed inside H's own memory
    assert torch.equal(got, got.triu())
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()))
    assert len(restored) == (case == "needs more damping")  # H rebuilt once from its untouched lower triangle


@pytest.mark.parametrize("rows", [False, True])
def test_permuting_in_place_equals_indexing(rows):
    x = torch.randn(70, 70)
    perm = torch.randperm(70, generator=torch.Generator().manual_seed(0))
    expected = x[perm] if rows else x[:, perm]
    gptq._permute_(x, perm, rows=rows, band=16)
    assert torch.equal(x, expected)


_PEAK = """
import sys
from pathlib import Path
import torch
from slimkit.engines.quantization.lowbit import gptq
from slimkit.engine.stream import memory
torch.set_num_threads(1)
def spd(n, rank):
    x = torch.randn(rank, n, generator=torch.Generator().manual_seed(3))
    return 2 * x.t() @ x / rank
gptq.quantize_gptq(torch.randn(8, 256), spd(256, 512), 4, 128, act_order=True)  # imports, LAPACK's set-up
n = int(sys.argv[1])
h, w = spd(n, 512), torch.randn(32, n)
Path("/proc/self/clear_refs").write_text("5")  # the peak restarts from the resident set now
before = memory.rss_bytes()
gptq.quantize_gptq(w, h, 4, 128, act_order=True, overwrite_h=True)
print(memory.peak_rss_bytes() - before)
"""


def test_gptq_holds_no_second_hessian_sized_matrix():
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux /proc to reset and read the peak resident set")
    n = 3072  # H is 38 MB (over glibc's 32 MB mmap ceiling): every copy of it is mapped fresh, so the peak shows it
    run = subprocess.run([sys.executable, "-c", _PEAK, str(n)], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    growth = int(run.stdout.split()[-1])  # a fresh process: no heap left over from other tests
    assert growth < n * n * 4, f"peak grew {growth / 1e6:.0f} MB over a {n * n * 4 / 1e6:.0f} MB Hessian"  # was 2.3 H


def test_the_in_place_factor_follows_torchs_thread_count_not_blas_own():
    """LAPACK's result depends on its thread count; it runs with torch's, so a resumed run writes the same bytes."""
    from threadpoolctl import threadpool_limits

    h = _spd(1536)
    results = []
    for blas_threads in (1, 2):  # whatever the process's BLAS was set to
        with threadpool_limits(limits=blas_threads, user_api="blas"):
            results.append(gptq._inverse_cholesky([h.clone()], 0.01))
    assert torch.equal(results[0], results[1])
