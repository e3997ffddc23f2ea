"""GPTQ on a GPU: the fused Triton column sweep runs (not disabled by its first-call check) and agrees with the loop."""

from __future__ import annotations

import warnings

import pytest
import torch

from slimkit.engines.quantization.lowbit import HessianAccumulator, gptq_columns, quantize_gptq

pytestmark = pytest.mark.cuda


def _layer(out_f: int, in_f: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(out_f, in_f, generator=gen)
    acc = HessianAccumulator(in_f)
    acc.add(torch.randn(2 * in_f, in_f, generator=gen) * torch.rand(in_f, generator=gen).add(0.1))
    return w, acc.h


@pytest.mark.parametrize(("group", "act_order"), [(128, True), (64, False), (48, False)])
def test_fused_sweep_runs_and_matches_the_torch_loop_and_the_cpu(monkeypatch, group, act_order):
    monkeypatch.setattr(gptq_columns, "_STATE", {})
    w, h = _layer(384, 512)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the kernel's fallback warning fails the test
        fused = quantize_gptq(w.cuda(), h.cuda(), 4, group, sym=act_order, act_order=act_order, clip_search=False)
    assert gptq_columns.triton_ready() and gptq_columns._STATE.get("checked"), gptq_columns._STATE
    monkeypatch.setenv("SLIMKIT_GPTQ_TRITON", "0")
    loop = quantize_gptq(w.cuda(), h.cuda(), 4, group, sym=act_order, act_order=act_order, clip_search=False)
    cpu = quantize_gptq(w, h, 4, group, sym=act_order, act_order=act_order, clip_search=False)
    # the same factor on the GPU: only float rounding differs; the CPU factorises H with LAPACK, a rounding apart too
    for other, agree in ((loop, 0.99), (cpu, 0.95)):
        assert float((fused[0].cpu() == other[0].cpu()).float().mean()) > agree
        torch.testing.assert_close(fused[1].cpu().float(), other[1].cpu().float(), rtol=2e-3, atol=0)
