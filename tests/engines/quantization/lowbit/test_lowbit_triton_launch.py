"""DirectLaunch's state machine with a stand-in for a Triton kernel: one normal launch compiles, the first direct
launch is checked against a normal one, then only direct launches, and any doubt means normal launches for good."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (DirectLaunch wraps Triton's compiled kernels)")

from slimkit.engines.quantization.lowbit import triton_launch  # noqa: E402


class FakeKernel:
    """``kernel[grid](x, y, n, **kw)`` writes ``y = x * 2 + n``; the compiled launcher does the same or worse."""

    def __init__(self, direct=lambda x, y, n, scale: y.copy_(x * scale + n)) -> None:
        self.normal, self.direct_calls, self.direct = 0, 0, direct
        self.memory: dict[int, torch.Tensor] = {}  # what a raw pointer points at

    def __getitem__(self, grid):
        def launch(x, y, n, SCALE, num_warps):
            self.normal += 1
            self.memory.update({x.data_ptr(): x, y.data_ptr(): y})
            y.copy_(x * SCALE + n)
            return SimpleNamespace(packed_metadata=(), function=None, run=self._run)
        return launch

    def _run(self, g0, g1, g2, stream, function, metadata, launch_md, enter, exit_, x, y, n, scale):
        assert (g0, g1, g2, stream) == (4, 1, 1, "stream")
        assert isinstance(x, int) and isinstance(y, int)  # raw pointers: no per-call pointer validation
        self.direct_calls += 1
        self.direct(self.memory[x], self.memory[y], n, scale)


@pytest.fixture(autouse=True)
def fake_driver(monkeypatch):
    monkeypatch.setattr(triton_launch, "driver", SimpleNamespace(
        active=SimpleNamespace(get_current_stream=lambda device: "stream")))


def _launcher(kernel):
    return triton_launch.DirectLaunch(kernel, (4,), {"SCALE": 2.0}, {"num_warps": 4}, varying=(0, 1), out=1)


def test_compiles_once_checks_once_then_launches_directly():
    kernel = FakeKernel()
    launch = _launcher(kernel)
    x, y = torch.arange(8.0), torch.empty(8)
    for _ in range(4):
        y.zero_()
        launch(x, y, 1)
        assert torch.equal(y, x * 2 + 1)
    assert launch.state == "fast" and kernel.normal == 2 and kernel.direct_calls == 3  # compile, check; 2 direct


@pytest.mark.parametrize("direct", [lambda x, y, n, scale: y.copy_(x), lambda *a: 1 / 0])
def test_a_direct_launch_that_disagrees_or_fails_is_never_used_again(direct):
    kernel = FakeKernel(direct)
    launch = _launcher(kernel)
    x, y = torch.arange(8.0), torch.empty(8)
    for _ in range(4):
        launch(x, y, 1)
        assert torch.equal(y, x * 2 + 1)  # the check restored and recomputed the output
    assert launch.state == "off" and kernel.normal == 4 and kernel.direct_calls == 1


def test_misaligned_tensors_and_launch_hooks_take_the_normal_path(monkeypatch):
    kernel = FakeKernel()
    launch = _launcher(kernel)
    x, y = torch.arange(9.0), torch.empty(9)
    launch(x, y, 1)
    launch(x, y, 1)
    assert launch.state == "fast"
    launch(x[1:], y[1:], 1)  # 4 bytes off the 16-byte alignment the kernel was compiled for
    assert kernel.normal == 3 and kernel.direct_calls == 1
    profiler = triton_launch.knobs.HookChain()
    profiler.add(lambda metadata: None)
    monkeypatch.setattr(triton_launch.knobs.runtime, "launch_enter_hook", profiler)
    launch(x, y, 1)
    assert kernel.normal == 4 and kernel.direct_calls == 1
