"""The CUDA int4 dispatch's logic, run on the CPU with injected timings: the chooser takes the smaller time, decisions
are keyed by shape and row bucket, failing paths are dropped, and a decode call makes no copies.

The candidates here are the dense path and the CPU build of PyTorch's int4 kernel (same format as the CUDA one);
the Triton kernels run through Triton's interpreter in test_lowbit_triton_int4.py, on a GPU in the cuda tests.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from slimkit.engines.quantization.lowbit import int4_dispatch, tinygemm
from slimkit.engines.quantization.lowbit.autotune import Chooser, row_bucket


class FakeTimes:
    """A timer that returns a fixed time per candidate name and records what it was asked to time."""

    def __init__(self, times: dict[str, float], default: float = 10.0) -> None:
        self.times, self.default, self.asked = times, default, []

    def __call__(self, name: str, fn) -> float:
        self.asked.append(name)
        fn()  # the candidate really runs: a broken one raises here
        return self.times.get(name, self.default)


def test_row_buckets_are_powers_of_two():
    assert [row_bucket(r) for r in (0, 1, 2, 3, 8, 9, 64, 65, 128, 129)] == [1, 1, 2, 4, 8, 16, 64, 128, 128, 256]


def test_chooser_takes_the_smaller_time_and_remembers_it_per_key():
    timer = FakeTimes({"a": 2.0, "b": 1.0})
    chooser = Chooser(timer)
    assert chooser.choose(("shape", 1), {"a": lambda: None, "b": lambda: None}) == "b"
    assert chooser.choose(("shape", 1), {"a": lambda: None, "b": lambda: None}) == "b"
    assert timer.asked == ["a", "b"]  # the second call was answered from the table
    timer.times = {"a": 1.0, "b": 2.0}
    assert chooser.choose(("shape", 8), {"a": lambda: None, "b": lambda: None}) == "a"  # another bucket: measured
    assert chooser.timings[("shape", 8)] == {"a": 1.0, "b": 2.0}
    assert chooser.choose(("only", 1), {"c": lambda: None}) == "c" and timer.asked == ["a", "b", "a", "b"]


def test_chooser_skips_a_candidate_that_raises_and_says_when_all_fail():
    def broken():
        raise RuntimeError("no kernel image for this device")

    chooser = Chooser(FakeTimes({"fast_but_broken": 0.1, "slow": 5.0}))
    assert chooser.choose("k", {"fast_but_broken": broken, "slow": lambda: None}) == "slow"
    assert chooser.timings["k"]["fast_but_broken"] == math.inf
    with pytest.raises(ValueError, match="every candidate failed for 'k2': a, b"):
        chooser.choose("k2", {"a": broken, "b": broken})
    with pytest.raises(ValueError, match="no candidate"):
        chooser.choose("k3", {})


def _reference(layer, x):
    return F.linear(x.float(), layer.dequantize(torch.float32), layer.bias.float())


@pytest.mark.parametrize(("times", "expected"), [({"dense": 5.0, "tinygemm": 1.0}, "tinygemm"),
                                                 ({"dense": 1.0, "tinygemm": 5.0}, "dense")])
def test_plan_runs_the_candidate_with_the_smaller_measured_time(times, expected, make_layer):
    layer = make_layer(4, 64, 256, 128)
    chooser = Chooser(FakeTimes(times))
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    name, fn = int4_dispatch.plan(layer, x, chooser, use_triton=False)
    assert name == expected
    key = int4_dispatch.decision_key(layer, torch.bfloat16, 4)
    assert chooser.decisions == {key: expected} and set(chooser.timings[key]) == {"dense", "tinygemm"}
    ref = _reference(layer, x)
    assert float((fn(x).float() - ref).abs().max() / ref.abs().max()) < 0.02
    # the state of the path that lost is freed; the winner's stays built
    families = {k[0] for k in layer.kernel_cache if isinstance(k, tuple)}
    assert families == {expected}


def test_decisions_are_per_shape_and_bucket_and_shared_by_layers_of_one_shape(make_layer):
    timer = FakeTimes({"dense": 5.0, "tinygemm": 1.0})
    chooser = Chooser(timer)
    a, b, other = make_layer(4, 64, 256, 128, seed=0), make_layer(4, 64, 256, 128, seed=1), make_layer(4, 32, 256, 128)
    x1, x8 = torch.randn(1, 256, dtype=torch.bfloat16), torch.randn(2, 4, 256, dtype=torch.bfloat16)
    assert int4_dispatch.plan(a, x1, chooser, use_triton=False)[0] == "tinygemm"
    assert len(timer.asked) == 2
    assert int4_dispatch.plan(b, x1, chooser, use_triton=False)[0] == "tinygemm"  # same shape: no new timing
    assert len(timer.asked) == 2
    timer.times = {"dense": 1.0, "tinygemm": 5.0}
    name, fn = int4_dispatch.plan(a, x8, chooser, use_triton=False)  # bucket 8: measured on its own
    assert name == "dense" and len(timer.asked) == 4 and fn(x8).shape == (2, 4, 64)
    assert int4_dispatch.plan(other, x1, chooser, use_triton=False)[0] == "dense"  # another shape: measured again
    assert len(timer.asked) == 6
    assert sorted(k[-1] for k in chooser.decisions) == [1, 1, 8]


def test_a_path_that_disagrees_with_the_dequantised_weight_is_dropped(monkeypatch, make_layer):
    layer = make_layer(4, 64, 256, 128)
    monkeypatch.setattr(tinygemm, "build", lambda layer, dtype: lambda x: torch.zeros(x.shape[0], 64, dtype=dtype))
    chooser = Chooser(FakeTimes({"dense": 5.0, "tinygemm": 0.1}))
    with pytest.warns(RuntimeWarning, match=r"int4 path tinygemm dropped \(error 1\.0"):
        name, _ = int4_dispatch.plan(layer, torch.randn(1, 256), chooser, use_triton=False)
    assert name == "dense" and chooser.decisions  # decided without the wrong path (a single candidate left)


def test_decode_call_makes_no_copy_and_reuses_the_prebuilt_state(monkeypatch, make_layer):
    """The kernel gets the caller's activation memory itself (no cast, no contiguous copy, no copying reshape),
    with the weight layout built at the first call and never again."""
    layer = make_layer(4, 64, 256, 128)
    monkeypatch.setattr(int4_dispatch, "CHOOSER", Chooser(FakeTimes({"dense": 5.0, "tinygemm": 1.0})))
    builds, seen = [], []
    real_build, real_call = tinygemm.build, tinygemm._call
    monkeypatch.setattr(tinygemm, "build", lambda *a: builds.append(1) or real_build(*a))

    def spying_call(mm, *rest):
        return real_call(lambda x, *args: seen.append(x) or mm(x, *args), *rest)

    monkeypatch.setattr(tinygemm, "_call", spying_call)
    first = int4_dispatch.matmul(layer, torch.randn(1, 1, 256, dtype=torch.bfloat16))  # measures and builds
    assert builds == [1] and first.shape == (1, 1, 64)
    weights = {id(v) for k, v in layer.kernel_cache.items() if k == ("tinygemm", torch.bfloat16)}
    for shape in ((1, 1, 256), (1, 256)):  # decode with and without a sequence dimension
        x = torch.randn(*shape, dtype=torch.bfloat16)
        seen.clear()
        out = int4_dispatch.matmul(layer, x)
        assert len(seen) == 1 and seen[0].data_ptr() == x.data_ptr() and seen[0].dtype == torch.bfloat16
        ref = _reference(layer, x)
        assert out.shape == (*shape[:-1], 64) and float((out.float() - ref).abs().max() / ref.abs().max()) < 0.02
    assert builds == [1] and list(layer.kernel_cache["plans"]) == [(1, torch.bfloat16, -1)]
    assert {id(v) for k, v in layer.kernel_cache.items() if k == ("tinygemm", torch.bfloat16)} == weights


def test_gradients_and_empty_inputs_go_to_the_dequantise_path(make_layer):
    layer = make_layer(4, 64, 256, 128)
    assert int4_dispatch.matmul(layer, torch.randn(2, 256, requires_grad=True)) is None
    assert int4_dispatch.matmul(layer, torch.randn(0, 256)) is None
    assert "plans" not in layer.kernel_cache


def test_dense_memory_policy(monkeypatch, make_layer):
    layer = make_layer(4, 64, 256, 128)
    calls = []
    real = layer.dequantize
    monkeypatch.setattr(layer, "dequantize", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(200, 256)
    monkeypatch.setenv("SLIMKIT_INT4_DENSE", "per_call")
    fn = int4_dispatch._dense(layer, torch.float32)
    fn(x), fn(x)
    assert len(calls) == 3  # built (and dropped) once, then dequantised on each call
    monkeypatch.setenv("SLIMKIT_INT4_DENSE", "cache")
    fn = int4_dispatch._dense(layer, torch.float32)
    fn(x), fn(x)
    assert len(calls) == 4
    assert float((fn(x) - F.linear(x, real(torch.float32), layer.bias)).abs().max()) < 1e-5
    monkeypatch.setenv("SLIMKIT_INT4_DENSE", "always")
    with pytest.raises(ValueError, match="SLIMKIT_INT4_DENSE='always'; use auto, cache or per_call"):
        int4_dispatch._dense(layer, torch.float32)


def test_packed_linear_on_cpu_never_enters_the_cuda_dispatch(monkeypatch, make_layer):
    layer = make_layer(4, 64, 256, 128)
    monkeypatch.setattr(int4_dispatch, "matmul", lambda *a: pytest.fail("CUDA dispatch on a CPU tensor"))
    assert layer(torch.randn(1, 256)).shape == (1, 64)


def test_a_path_that_fails_to_build_is_dropped_with_its_error(monkeypatch, make_layer):
    layer = make_layer(4, 64, 256, 128)

    class CompilationError(Exception):  # Triton's compile errors are not RuntimeErrors
        pass

    def broken(layer, dtype):
        raise CompilationError("at 12:8: unsupported tensor shape")

    monkeypatch.setattr(tinygemm, "build", broken)
    with pytest.warns(RuntimeWarning, match="int4 path tinygemm dropped .*unsupported tensor shape"):
        name, fn = int4_dispatch.plan(layer, torch.randn(1, 256), Chooser(FakeTimes({})), use_triton=False)
    assert name == "dense" and fn(torch.randn(1, 256)).shape == (1, 64)


def test_prefill_sizes_with_only_the_dense_path_are_neither_probed_nor_timed(monkeypatch, make_layer):
    layer = make_layer(4, 64, 256, 128)
    timer = FakeTimes({})
    monkeypatch.setattr(int4_dispatch, "_verified", lambda *a: pytest.fail("probed a single candidate"))
    x = torch.randn(600, 256)  # bucket 1024: above tinygemm's and the Triton GEMM's buckets
    name, fn = int4_dispatch.plan(layer, x, Chooser(timer), use_triton=True)
    assert name == "dense" and timer.asked == []
    assert float((fn(x) - _reference(layer, x)).abs().max()) < 1e-4


def test_a_seen_input_shape_is_called_directly_by_the_layer(monkeypatch, make_layer):
    """After the dispatch ran a shape once, PackedLinear.forward calls that path itself (no dispatch, no reshape
    logic): a kept dense weight as ``F.linear(x, weight, bias)``, exactly nn.Linear's call, for any input of that
    shape (strided, with gradients); ``use_kernel=False`` and new shapes still take the full path."""
    layer = make_layer(4, 64, 256, 128)
    monkeypatch.setattr(int4_dispatch, "CHOOSER", Chooser(FakeTimes({"dense": 1.0, "tinygemm": 5.0})))
    x = torch.randn(1, 3, 256)
    first = int4_dispatch.matmul(layer, x)  # what the CUDA branch of the layer's forward runs the first time
    key = (torch.Size([1, 3, 256]), torch.float32)
    assert set(layer.direct_calls()) == {key}
    weight, bias = layer.direct_calls()[key]
    assert weight is layer.kernel_cache[("dense", torch.float32)].weight and torch.equal(bias, layer.bias)
    strided = torch.randn(1, 3, 512)[..., ::2]
    references = [_reference(layer, t) for t in (x, strided)]
    monkeypatch.setattr(layer, "dequantize", lambda *a: pytest.fail("dequantised again"))
    assert torch.equal(layer(x), first)
    for t, ref in zip((x, strided), references, strict=True):
        assert float((layer(t) - ref).abs().max()) < 1e-4
    grad = x.clone().requires_grad_()
    layer(grad).sum().backward()  # gradients flow to the input through the kept weight
    torch.testing.assert_close(grad.grad, weight.sum(0).expand_as(x))
    monkeypatch.undo()
    layer.use_kernel = False
    seen = []
    monkeypatch.setattr(layer, "dequantize", lambda *a: seen.append(1) or weight)
    layer(x)
    layer.use_kernel = True
    layer(torch.randn(2, 256))  # a shape never dispatched (a CPU layer: its CPU path, not the direct call)
    assert seen == [1]
    layer.to(torch.float64)
    assert "_direct" not in layer.__dict__  # moved or cast: the state built for the old tensors is gone


def _bucket_times(winners: dict[int, str]):
    """A timer that makes ``winners[bucket]`` the fastest for that row bucket (read off the probe's rows)."""
    def timer(name, fn):
        fn()
        return 1.0 if name == winners[fn.args[0].shape[0]] else 5.0
    return timer


def test_each_row_bucket_runs_its_measured_path_directly_without_allocating(monkeypatch, make_layer):
    """Decode buckets on the int4 kernel, prefill buckets on the kept dense weight, as measured on an H200; a
    direct call allocates nothing beyond what its op does (no cast, copy or reshape of the input or the weight)."""
    from slimkit.engines.quantization.lowbit.memory_trace import LiveBytes

    layer = make_layer(4, 64, 256, 128)
    winners = {1: "tinygemm", 8: "tinygemm", 64: "dense", 128: "dense"}
    monkeypatch.setattr(int4_dispatch, "CHOOSER", Chooser(_bucket_times(winners)))
    inputs = {rows: torch.randn(1, rows, 256, dtype=torch.bfloat16) for rows in (1, 7, 64, 100)}
    for x in inputs.values():
        int4_dispatch.matmul(layer, x)
    direct = layer.direct_calls()
    paths = {rows: "dense" if direct[(x.shape, x.dtype)][0] is not None else "kernel" for rows, x in inputs.items()}
    assert paths == {1: "kernel", 7: "kernel", 64: "dense", 100: "dense"}
    assert {k[:2] for k in layer.kernel_cache["plans"]} == {(1, torch.bfloat16), (8, torch.bfloat16),
                                                            (64, torch.bfloat16), (128, torch.bfloat16)}
    dense_weight = layer.kernel_cache[("dense", torch.bfloat16)].weight
    assert all(direct[(x.shape, x.dtype)][0] is dense_weight for rows, x in inputs.items() if rows >= 64)
    monkeypatch.setattr(int4_dispatch, "matmul", lambda *a: pytest.fail("dispatched a shape it has seen"))
    for rows, x in inputs.items():
        weight, bias = direct[(x.shape, x.dtype)]
        with LiveBytes() as plain:  # what the op itself allocates (oneDNN's bf16 GEMM copies the weight on a CPU)
            F.linear(x, weight, bias) if weight is not None else layer.kernel_cache[("tinygemm", x.dtype)](x[0])
        with LiveBytes() as live:
            out = layer(x)
        assert out.shape == (1, rows, 64) and live.allocations == plain.allocations, (rows, live.peak.top())
        ref = _reference(layer, x)
        assert float((out.float() - ref).abs().max() / ref.abs().max()) < 0.02
