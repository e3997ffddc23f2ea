"""The Triton int4 kernels' layout and numbers on a CPU: the packed words and scale tables reproduce the layer's
dequantised weight (plain torch), and the kernels themselves, run by Triton's interpreter, equal the dense matmul.

The GEMM's bfloat16 ``tl.dot`` is checked on a GPU only (tests marked cuda): the interpreter computes with numpy,
which has no bfloat16, so here the GEMM runs in float16 and the GEMV in bfloat16 and float32.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from slimkit.engines.quantization.lowbit import int4_dispatch, triton_gemm, triton_int4
from slimkit.engines.quantization.lowbit.autotune import Chooser, row_bucket


def _unpacked(tw: triton_int4.TritonWeight) -> torch.Tensor:
    """``q * s + m`` as a dense ``[N, K]`` float32 weight, read back from the kernel layout."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    q = ((tw.words.unsqueeze(1) >> shifts.view(1, 8, 1)) & 0xF).reshape(-1, tw.out_features)
    s = tw.scales.float().repeat_interleave(tw.group, dim=0)
    m = tw.mins.float().repeat_interleave(tw.group, dim=0)
    return (q.float() * s + m)[: tw.in_features].t()


@pytest.mark.parametrize(("bits", "out_f", "in_f", "group", "kernel_group"),
                         [(4, 40, 200, 128, 128), (2, 24, 256, 32, 32), (3, 16, 96, 48, 16), (4, 8, 512, 512, 128)])
def test_kernel_layout_reproduces_the_dequantised_weight(bits, out_f, in_f, group, kernel_group, make_layer):
    layer = make_layer(bits, out_f, in_f, group)
    tw = triton_int4.prepare(layer.codes(), layer.scales, layer.zeros, group, layer.bias)
    assert tw.group == kernel_group and tw.words.dtype == torch.int32
    assert tw.words.shape == (triton_int4.K_ALIGN // 8 * -(-in_f // triton_int4.K_ALIGN), out_f)
    assert tw.scales.shape == tw.mins.shape == (tw.words.shape[0] * 8 // kernel_group, out_f)
    # float16 mins = -z * s rounded: within a few float16 ulps of the layer's own dequantisation
    assert float((_unpacked(tw) - layer.dequantize(torch.float32)).abs().max()) < 2e-3 * float(layer.scales.max()) * 16


def test_layouts_that_do_not_fit_are_refused(make_layer):
    assert triton_int4.kernel_group(24) is None and triton_int4.kernel_group(256) == 128
    layer = make_layer(4, 8, 96, 24)
    with pytest.raises(ValueError, match="group_size=24 has no divisor >= 16"):
        triton_int4.prepare(layer.codes(), layer.scales, layer.zeros, 24, None)
    with pytest.raises(ValueError, match="must divide K_ALIGN"):
        triton_int4.Gemv(64, 128, split_k=8)


@pytest.fixture
def interpreted(monkeypatch):
    """The kernels run by Triton's interpreter on the CPU, for this test only."""
    pytest.importorskip("triton", reason="triton is not installed (the Triton kernels are checked by its interpreter)")
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):  # numpy >= 2.4 refuses int() of a 1-element array; Triton 3.6 does that
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch_lang_tensor)
    for kernels in (triton_int4.KERNELS, triton_gemm.KERNELS):
        for name, kernel in list(kernels.items()):
            monkeypatch.setitem(kernels, name, interpreter.InterpretedFunction(kernel.fn))


def _rel_err(out: torch.Tensor, layer, x: torch.Tensor) -> float:
    bias = None if layer.bias is None else layer.bias.float()
    ref = F.linear(x.float(), layer.dequantize(torch.float32), bias)
    return float((out.float() - ref).abs().max() / ref.abs().max())


#: (bits, out, in, group, bias), smallest first (the interpreter's time grows with the layer)
CASES = [(3, 16, 96, 48, True), (2, 24, 256, 32, False), (4, 40, 200, 128, True)]


#: the interpreter is slow: two configurations (one with split K) per dtype in the fast tier, all in the slow one
GEMV_CASES = [pytest.param(cfg, dtype, id=f"{cfg.name}-{str(dtype)[6:]}",
                           marks=() if (i, dtype) in ((0, torch.bfloat16), (3, torch.bfloat16), (1, torch.float32))
                           else pytest.mark.slow)
              for dtype in (torch.bfloat16, torch.float32) for i, cfg in enumerate(triton_int4.GEMV_CONFIGS)]


@pytest.mark.parametrize(("cfg", "dtype"), GEMV_CASES)
def test_gemv_kernel_equals_the_dense_matmul(cfg, dtype, interpreted, make_layer):
    bits, out_f, in_f, group, bias = CASES[triton_int4.GEMV_CONFIGS.index(cfg) % len(CASES)]
    layer = make_layer(bits, out_f, in_f, group, bias=bias)
    tw = triton_int4.prepare(layer.codes(), layer.scales, layer.zeros, group, layer.bias)
    x = torch.randn(1, in_f).to(dtype)
    out = triton_int4.gemv(x, tw, cfg)
    assert out.shape == (1, out_f) and out.dtype == dtype
    assert _rel_err(out, layer, x) < (1e-2 if dtype == torch.bfloat16 else 3e-3)  # float16 mins: ~1e-3


@pytest.mark.parametrize(("rows", "which", "dtype"), [(3, 1, torch.float16),
                                                      pytest.param(3, 2, torch.float32, marks=pytest.mark.slow),
                                                      pytest.param(8, 0, torch.bfloat16, marks=pytest.mark.slow)])
def test_gemv_kernel_takes_a_few_rows_at_once(rows, which, dtype, interpreted, make_layer):
    """2 to 8 rows share every dequantised word (bucket 4 for 3 rows: one row masked; split K for index 2)."""
    bits, out_f, in_f, group, bias = CASES[0]
    layer = make_layer(bits, out_f, in_f, group, bias=bias)
    tw = triton_int4.prepare(layer.codes(), layer.scales, layer.zeros, group, layer.bias)
    cfg = triton_int4.gemv_configs(row_bucket(rows))[which]
    x = torch.randn(rows, in_f).to(dtype)
    out = triton_int4.gemv(x, tw, cfg)
    assert cfg.rows >= rows and out.shape == (rows, out_f) and out.dtype == dtype
    assert _rel_err(out, layer, x) < (1e-2 if dtype == torch.bfloat16 else 5e-3)
    with pytest.raises(ValueError, match="takes at most"):
        triton_int4.gemv(torch.randn(cfg.rows + 1, in_f).to(dtype), tw, cfg)


@pytest.mark.parametrize(("rows", "case", "which"), [(5, 1, 1), (1, 0, 2),
                                                      pytest.param(5, 1, 3, marks=pytest.mark.slow),
                                                      pytest.param(33, 2, 0, marks=pytest.mark.slow),
                                                      pytest.param(33, 2, 2, marks=pytest.mark.slow)])
def test_gemm_kernel_equals_the_dense_matmul(rows, case, which, interpreted, make_layer):
    """Plain-tile (0, 1) and planes (2, 3) configurations."""
    bits, out_f, in_f, group, bias = CASES[case]
    layer = make_layer(bits, out_f, in_f, group, bias=bias)
    tw = triton_int4.prepare(layer.codes(), layer.scales, layer.zeros, group, layer.bias)
    x = torch.randn(rows, in_f).half()
    cfg = triton_gemm.gemm_configs(rows)[which]
    out = triton_gemm.gemm(x, tw, cfg)
    assert out.shape == (rows, out_f) and out.dtype == torch.float16
    assert _rel_err(out, layer, x) < 5e-3, cfg.name


@pytest.mark.parametrize(("rows", "winner"), [pytest.param(1, triton_int4.GEMV_CONFIGS[3].name, marks=pytest.mark.slow),
                                              (6, triton_gemm.gemm_configs(8)[1].name)])
def test_dispatch_runs_a_triton_kernel_when_it_measures_fastest(rows, winner, interpreted, make_layer, monkeypatch):
    layer = make_layer(4, 16, 128, 128, bias=False)
    # one Triton config per kernel (beside dense and tinygemm) keeps the interpreted verification short
    monkeypatch.setattr(triton_int4, "GEMV_CONFIGS", triton_int4.GEMV_CONFIGS[3:4])
    gemv_configs = triton_int4.gemv_configs
    monkeypatch.setattr(triton_int4, "gemv_configs", lambda r: gemv_configs(r) if r == 1 else ())
    gemm_configs = triton_gemm.gemm_configs
    monkeypatch.setattr(triton_gemm, "gemm_configs", lambda r: gemm_configs(r)[1:2])
    times = {winner: 1.0}
    chooser = Chooser(lambda name, fn: fn() is None or times.get(name, 9.0))
    x = torch.randn(rows, 128).half()
    name, fn = int4_dispatch.plan(layer, x, chooser, use_triton=True)
    key = int4_dispatch.decision_key(layer, torch.float16, 1 if rows == 1 else 8)
    assert name == winner and {"dense", "tinygemm", winner} <= set(chooser.timings[key])
    assert _rel_err(fn(x), layer, x) < 5e-3
    assert {k[0] for k in layer.kernel_cache if isinstance(k, tuple)} == {"triton"}  # losers' state freed
