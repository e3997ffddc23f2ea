"""The fused C kernel for packed low-bit matmuls on CPU (lowbit/_native.c through lowbit/native.py)."""

import shutil
import subprocess

import pytest
import torch
import torch.nn.functional as F

from slimkit.engines.quantization.lowbit import kernels, native, tinygemm


def _avx2() -> bool:
    try:
        return " avx2" in open("/proc/cpuinfo").read()
    except OSError:
        return False


#: where the kernel must exist: Linux with a C compiler on an AVX2 CPU (CI and this machine); elsewhere the
#: tests below check the fallback instead
EXPECT_NATIVE = shutil.which("cc") is not None and _avx2()


def _native(layer, x):
    return native.matmul(x, layer.qweight, layer.scales, layer.zeros, layer.bits, layer.group_size,
                         layer.out_features, layer.bias)


def test_kernel_is_built_where_a_compiler_and_avx2_exist():
    assert (native.kernel() is not None) == EXPECT_NATIVE


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize(("in_f", "group"), [(256, 128), (200, 128), (83, 16), (96, 32), (1040, 64)])
@pytest.mark.parametrize("rows", [1, 3, 8])
def test_native_matmul_equals_the_dequantised_dense_matmul(bits, in_f, group, rows, make_layer):
    """Every width, full and partial last groups, widths that are not a whole packing unit, 1..8 rows."""
    if not EXPECT_NATIVE:
        pytest.fail("no C compiler or no AVX2 here: run test_fallback_without_the_kernel_gives_the_same_numbers")
    layer = make_layer(bits, 37, in_f, group, bias=rows != 3)
    x = torch.randn(rows, in_f)
    out = _native(layer, x)
    assert out is not None and out.shape == (rows, 37)
    torch.testing.assert_close(out, F.linear(x, layer.dequantize(), layer.bias), atol=1e-4, rtol=1e-4)


def test_packed_linear_decode_goes_through_the_native_kernel(monkeypatch, make_layer):
    layer = make_layer(3, 64, 256, 128)
    calls = []
    real = native.layer_matmul
    monkeypatch.setattr(native, "layer_matmul", lambda *a, **k: calls.append(tuple(a[1].shape)) or real(*a, **k))
    x = torch.randn(1, 1, 256)
    out = layer(x)
    assert calls == [(1, 1, 256)]
    assert out.shape == (1, 1, 64)
    layer(torch.randn(1, native.MAX_ROWS + 1, 256))  # more rows than the kernel takes: not called
    assert len(calls) == 1


def test_kernel_declines_what_it_cannot_compute(make_layer):
    layer = make_layer(4, 16, 64, 32)
    assert _native(layer, torch.randn(native.MAX_ROWS + 1, 64)) is None
    assert _native(layer, torch.randn(2, 64, dtype=torch.float64)) is None
    assert _native(layer, torch.randn(2, 64, requires_grad=True)) is None  # no backward in C
    odd = make_layer(3, 16, 64, 12)  # a group of 12 is not a whole number of 8-value units
    assert _native(odd, torch.randn(1, 64)) is None
    x = torch.randn(1, 64)
    torch.testing.assert_close(odd(x), F.linear(x, odd.dequantize(), odd.bias), atol=1e-4, rtol=1e-4)


def test_fallback_without_the_kernel_gives_the_same_numbers(fresh_kernel, monkeypatch, make_layer):
    layer = make_layer(4, 48, 200, 64)
    x = torch.randn(2, 200)
    expected = F.linear(x, layer.dequantize(), layer.bias)
    monkeypatch.setenv("SLIMKIT_NATIVE", "0")
    assert native.kernel() is None
    torch.testing.assert_close(kernels.packed_matmul(layer, x), expected, atol=1e-4, rtol=1e-4)


def test_a_failing_compiler_warns_once_and_falls_back(fresh_kernel, monkeypatch):
    monkeypatch.setenv("CC", "false")
    with pytest.warns(RuntimeWarning, match="could not build its low-bit CPU kernel"):
        assert native.kernel() is None
    assert native.kernel() is None  # remembered: no second build, no second warning
    assert not list((fresh_kernel / "native").glob("*.so"))  # no half-written library left behind


@pytest.mark.skipif(not EXPECT_NATIVE, reason="needs a C compiler (checked by test_kernel_is_built_...)")
def test_the_build_is_cached_per_source_and_cpu(fresh_kernel, monkeypatch):
    assert native.kernel() is not None
    built = list((fresh_kernel / "native").glob("lowbit-*.so"))
    assert len(built) == 1
    native._STATE.clear()
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: ran.append(a))
    assert native.kernel() is not None and ran == []  # loaded from the cache, not compiled again


@pytest.mark.parametrize("bits", [2, 3, 4])
@pytest.mark.parametrize("group", [32, 128])
def test_int4_kernel_scales_and_mins_reproduce_our_dequantisation(bits, group, make_layer):
    """The CUDA path's (scale, min) mapping, checked through PyTorch's CPU build of the same int4 kernel format
    (the CUDA kernel itself needs a GPU: tests marked cuda)."""
    layer = make_layer(bits, 64, 256, group)
    tiny = tinygemm.group_for(layer)
    assert tiny == group  # our group sizes 32 and 128 are tinygemm group sizes themselves
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(layer.codes().to(torch.int32), 8)
    x = torch.randn(3, 256)
    out = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, tiny, tinygemm.scales_and_mins(layer, tiny))
    torch.testing.assert_close(out + layer.bias, F.linear(x, layer.dequantize(), layer.bias), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize(("in_f", "group"), [(200, 128), (83, 16), (1040, 64)])
def test_planar_prefill_path_equals_the_dequantised_dense_matmul(bits, in_f, group, make_layer):
    if not EXPECT_NATIVE:
        pytest.fail("no C compiler or no AVX2 here: run test_fallback_without_the_kernel_gives_the_same_numbers")
    layer = make_layer(bits, 45, in_f, group)
    x = torch.randn(37, in_f)
    out = native.planar_matmul(x, layer.qweight, layer.scales, layer.zeros, bits, group, in_f, layer.bias)
    assert out is not None and out.shape == (37, 45)
    torch.testing.assert_close(out, F.linear(x, layer.dequantize(), layer.bias), atol=1e-4, rtol=1e-4)


def test_packed_linear_prefill_goes_through_the_planar_kernel(monkeypatch, make_layer):
    layer = make_layer(4, 64, 256, 128)
    calls = []
    real = native.planar_matmul
    monkeypatch.setattr(native, "planar_matmul", lambda *a, **k: calls.append(a[0].shape) or real(*a, **k))
    x = torch.randn(2, 20, 256)
    out = layer(x)
    assert calls == [(40, 256)] and out.shape == (2, 20, 64)
    layer.use_kernel = False
    torch.testing.assert_close(layer(x), out, atol=1e-4, rtol=1e-4)
    assert native.planar_matmul(torch.randn(20, 256, requires_grad=True), layer.qweight, layer.scales, layer.zeros,
                                4, 128, 256, layer.bias) is None  # no backward in C: the torch path handles training
