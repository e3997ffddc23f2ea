"""Large weights are quantized in row slices and GPTQ hands its Hessian over: less memory, the same numbers."""

from __future__ import annotations

import pytest
import torch

from slimkit.compression.quantization.lowbit import gptq, hqq, rtn


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
