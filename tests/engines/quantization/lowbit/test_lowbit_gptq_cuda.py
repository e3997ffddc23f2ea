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


def _warm_cuda_libraries() -> None:
    """cuBLAS's and cuSOLVER's first calls allocate their workspaces: keep them out of a measured peak."""
    a = torch.eye(64, device="cuda") * 2
    lower = torch.linalg.cholesky_ex(a)[0]
    torch.linalg.solve_triangular(lower, torch.eye(64, device="cuda"), upper=False)
    (a @ a).sum().item()
    torch.cuda.synchronize()


def test_the_inverse_hessian_factor_holds_two_matrices_on_the_gpu_and_matches_lapack():
    """The CUDA factor (one Cholesky of the reversed H, one in-place triangular solve): at most two [n, n]
    matrices allocated, where cholesky_inverse + a second Cholesky held four (cuSOLVER copies its input twice)."""
    from slimkit.engines.quantization.lowbit import gptq

    n = 2048
    _, h = _layer(16, n)
    expected = gptq._inverse_cholesky_in_place(h.clone(), 0.01)
    _warm_cuda_libraries()
    box = [h.cuda()]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    got = gptq._inverse_cholesky_torch(box, 0.01)
    torch.cuda.synchronize()
    matrix = n * n * 4
    assert torch.cuda.max_memory_allocated() - base <= matrix + 1.1 * matrix  # H, then never more than two
    torch.testing.assert_close(got.cpu(), expected, rtol=2e-3, atol=2e-3 * float(expected.abs().max()))


def test_gptq_of_a_model_on_the_gpu_stays_within_the_model_and_two_hessians():
    """quantize_model_gptq on CUDA: peak allocation <= the model + two [ffn, ffn] float32 matrices + small buffers,
    and no dense copy of a quantized layer left afterwards (the advance run's dense weights are dropped)."""
    import transformers

    from slimkit.engines.quantization.lowbit import quantize_model_gptq

    hidden, ffn = 256, 2048
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, 512, (4, 64))
    _warm_cuda_libraries()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()  # the model (and warm workspaces)
    quantize_model_gptq(model, ids, bits=4, group_size=128, sym=True, act_order=True, clip_search=False)
    torch.cuda.synchronize()
    two_hessians = 2 * ffn * ffn * 4
    down_fp32 = hidden * ffn * 4
    assert torch.cuda.max_memory_allocated() - base <= two_hessians + 4 * down_fp32 + 8 * 2**20
    assert torch.cuda.memory_allocated() < base  # only packed weights left: less than the bf16 layers
