"""Forced instruction sets of the low-bit CPU kernel (SLIMKIT_NATIVE_ISA): the AVX2 build, the AVX-512 build and
the pure-torch fallback must give the same numbers, on any machine that can run them."""

import shutil
import warnings

import pytest
import torch
import torch.nn.functional as F

from slimkit.engines.quantization.lowbit import kernels, native

HAVE_CC = shutil.which("cc") is not None


def _flags() -> set[str]:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


FLAGS = _flags()
#: what this CPU can run, read independently of native.py's probe (the tests check the probe against it)
CAN_AVX2 = HAVE_CC and {"avx2", "fma", "f16c"} <= FLAGS
CAN_AVX512 = HAVE_CC and {"avx512f", "avx512bw", "avx512vl"} <= FLAGS and CAN_AVX2


def test_the_probe_matches_the_cpu_flags():
    assert native.cpu_supports("avx2") == ({"avx2", "fma", "f16c"} <= FLAGS)
    assert native.cpu_supports("avx512") == ({"avx512f", "avx512bw", "avx512vl", "avx2", "fma", "f16c"} <= FLAGS)
    assert native.cpu_supports("auto")


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_a_forced_build_loads_exactly_where_the_probe_allows_it(isa):
    can = CAN_AVX2 if isa == "avx2" else CAN_AVX512
    if can:
        lib = native.kernel(isa)
        assert lib is not None
        assert lib.slimkit_lowbit_simd() == (256 if isa == "avx2" else 512)
        assert native.isa_name(isa) == isa
    elif HAVE_CC:  # the CPU lacks the set: a warning and the torch path, never an illegal instruction
        saved = dict(native._STATE)
        native._STATE.pop(f"lib-{isa}", None)
        try:
            with pytest.warns(RuntimeWarning, match="lacks"):
                assert native.kernel(isa) is None
        finally:
            native._STATE.clear()
            native._STATE.update(saved)
    else:  # no compiler: nothing to build
        assert native.kernel(isa) is None


def test_the_isa_comes_from_the_environment_or_use_isa(fresh_kernel, monkeypatch):
    monkeypatch.setenv("SLIMKIT_NATIVE_ISA", "bogus")
    with pytest.raises(ValueError, match="SLIMKIT_NATIVE_ISA"):
        native.kernel()
    monkeypatch.setenv("SLIMKIT_NATIVE_ISA", "avx2")
    native._STATE.clear()
    assert native.requested_isa() == "avx2"
    assert native.isa_name() == ("avx2" if CAN_AVX2 else "torch")
    with native.use_isa("auto"):
        assert native.requested_isa() == "auto"
        assert native.isa_name() == ("avx512" if CAN_AVX512 else "avx2" if CAN_AVX2 else "torch")
    assert native.requested_isa() == "avx2"
    with pytest.raises(ValueError):
        with native.use_isa("sse"):
            pass


@pytest.mark.skipif(not CAN_AVX512, reason="the probe says this CPU has no AVX-512 (asserted by the probe test)")
def test_each_isa_is_built_and_cached_separately(fresh_kernel):
    libs = {isa: native.kernel(isa) for isa in ("avx2", "avx512")}
    assert libs["avx2"].slimkit_lowbit_simd() == 256 and libs["avx512"].slimkit_lowbit_simd() == 512
    assert len(list((fresh_kernel / "native").glob("lowbit-*.so"))) == 2


def _paths(layer, x):
    """Output of every path this machine can run: name -> tensor (the torch fallback always)."""
    out = {"dense": F.linear(x, layer.dequantize(), layer.bias)}
    if x.shape[0] <= kernels.CPU_SMALL_BATCH:
        out["torch"] = kernels._cpu_planes(layer, x)
    for isa, can in (("avx2", CAN_AVX2), ("avx512", CAN_AVX512)):
        if not can:
            continue
        with native.use_isa(isa):
            assert native.isa_name() == isa
            if x.shape[0] <= native.MAX_ROWS:
                out[isa] = native.layer_matmul(layer, x)
                out[f"{isa}-generic"] = native.matmul(x, layer.qweight, layer.scales, layer.zeros, layer.bits,
                                                      layer.group_size, layer.out_features, layer.bias)
            else:
                out[isa] = native.planar_matmul(x, layer.qweight, layer.scales, layer.zeros, layer.bits,
                                                layer.group_size, layer.in_features, layer.bias)
    return out


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize(("out_f", "in_f", "group"),
                         [(37, 256, 128), (64, 576, 128), (33, 200, 64), (19, 83, 16), (96, 1536, 128),
                          (40, 1040, 32)])
@pytest.mark.parametrize("rows", [1, 2, 8, 24])
def test_avx2_avx512_and_torch_paths_give_the_same_numbers(bits, out_f, in_f, group, rows, make_layer):
    """Odd and even row counts (the decode kernel pairs rows), partial groups, widths that are not whole units,
    decode (1..8 tokens) and prefill (24 tokens)."""
    layer = make_layer(bits, out_f, in_f, group, bias=rows != 2, seed=bits + rows)
    x = torch.randn(rows, in_f, generator=torch.Generator().manual_seed(in_f))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no silent fallback inside a forced build
        out = _paths(layer, x)
    expected_paths = {"dense"} | ({"torch"} if rows <= kernels.CPU_SMALL_BATCH else set())
    for isa, can in (("avx2", CAN_AVX2), ("avx512", CAN_AVX512)):
        if can:
            expected_paths |= {isa} | ({f"{isa}-generic"} if rows <= native.MAX_ROWS else set())
    assert set(out) == expected_paths
    for name, y in out.items():
        assert y is not None, name
        torch.testing.assert_close(y, out["dense"], atol=2e-4, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
    if CAN_AVX2 and CAN_AVX512:
        torch.testing.assert_close(out["avx2"], out["avx512"], atol=1e-4, rtol=1e-5)


@pytest.mark.skipif(not CAN_AVX2, reason="no AVX2 per the probe: no kernel to run (asserted by the probe test)")
def test_a_packed_layer_follows_the_forced_isa(monkeypatch, make_layer):
    layer = make_layer(4, 48, 576, 128)
    x = torch.randn(1, 1, 576)
    results = {}
    for isa in ("avx2", "avx512") if CAN_AVX512 else ("avx2",):
        with native.use_isa(isa):
            seen = []
            real = native.kernel
            monkeypatch.setattr(native, "kernel", lambda *a, _r=real, _s=seen: _s.append(_r(*a)) or _s[-1])
            results[isa] = layer(x)
            monkeypatch.setattr(native, "kernel", real)
            assert seen and seen[0].slimkit_lowbit_simd() == (256 if isa == "avx2" else 512)
    for y in results.values():
        torch.testing.assert_close(y, F.linear(x, layer.dequantize(), layer.bias), atol=1e-4, rtol=1e-4)
