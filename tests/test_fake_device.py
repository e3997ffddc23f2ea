"""Wrong-device bugs caught without a GPU: slimkit's paths run on ``fakegpu`` (tests/fake_device.py).

``fakegpu`` is a second device that fails like CUDA when an op mixes it with CPU tensors. The cases are the four
device bugs a first GPU run found (issue 32): streaming GPTQ with the rotary ``position_embeddings`` left on the
CPU, channel-energy pruning of a Llama, packed dynamic batching of a sentence encoder and SPOS search (each
through the algorithm harness, as ``tests/algorithms/test_algorithms_cuda.py`` runs them on CUDA), plus the device
itself. Every case fails on the code before the fix and passes after it. Marked slow: every other tester that
``test_algorithms_cuda.py`` runs on CUDA, run on the fake device the same way.

Registering the device changes process-wide torch state (``torch.accelerator`` reports it), which the rest of
the suite must not see, so the cases run in one child process: ``python -m tests.test_fake_device CASE...``
prints one JSON line, the error of each case (None when it passed).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.algorithms.test_algorithms_cuda import _cuda_cases

#: name -> a function that raises when the case fails (run in the child process only)
CASES: dict[str, Callable[[], None]] = {}


def _case(fn: Callable[[], None]) -> Callable[[], None]:
    CASES[fn.__name__] = fn
    return fn


def _device() -> torch.device:
    from tests.fake_device import enable

    return enable()


def _expect_device_error(fn: Callable[[], object]) -> None:
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*fakegpu:0 and cpu"):
        fn()


@_case
def device_fails_like_cuda() -> None:
    """The device: values as on the CPU, CUDA's mixing errors and exceptions, through autograd and threads."""
    import threading

    from slimkit import SmashConfig

    dev = _device()
    assert SmashConfig(device="fakegpu").device == "fakegpu"
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    layer = torch.nn.Linear(3, 2)
    expected = layer(x)
    layer.to(dev)
    assert layer.weight.device == dev and isinstance(layer.weight, torch.nn.Parameter)
    out = layer(x.to(dev))
    assert out.device == dev and torch.equal(out.cpu(), expected)
    _expect_device_error(lambda: layer(x))  # CPU input, weights on the device
    _expect_device_error(lambda: torch.nn.functional.embedding(torch.tensor([1]), torch.ones(3, 2, device=dev)))
    assert (out * torch.tensor(2.0)).device == dev  # a CPU scalar is allowed, as on CUDA
    assert out[torch.tensor([0, 2])].shape == (2, 2)  # CPU indices are allowed, as on CUDA
    assert torch.arange(5, device=dev).shape == (5,) and torch.zeros(2, 3, device=dev).device == dev
    assert torch.tensor([1, 2], device=dev).tolist() == [1, 2]
    out.sum().backward()
    assert layer.weight.grad.device == dev
    with torch.inference_mode():
        assert layer.weight[:1].device == dev
    errors: list[BaseException] = []

    def other_thread() -> None:  # a dispatch mode would be thread-local; the device is not
        try:
            _expect_device_error(lambda: layer(x))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert not errors, errors


@_case
def stream_gptq_moves_rotary_inputs() -> None:
    """Issue 32 (a): streaming GPTQ and AWQ; the captured ``position_embeddings`` reach each block on the device."""
    from safetensors.torch import load_file

    from slimkit import smash_folder
    from tests.engine.stream.conftest import make_config, write_folder

    _device()
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_folder(Path(tmp) / "model", shards=2, hidden_size=64, intermediate_size=128,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
        codes = {}
        for device in ("cpu", "fakegpu"):
            cfg = make_config("gptq")
            cfg.device = device
            result = smash_folder(folder, cfg, Path(tmp) / device, stream=True, progress=False, verbose=False)
            assert result.blocks == 2
            codes[device] = load_file(str(Path(tmp) / device / "model.safetensors"))
        assert codes["cpu"].keys() == codes["fakegpu"].keys()
        packed = [k for k in codes["cpu"] if k.endswith(".qweight")]
        same = sum(int((codes["cpu"][k] == codes["fakegpu"][k]).sum()) for k in packed)
        assert same / sum(codes["cpu"][k].numel() for k in packed) > 0.9  # float32 both; only the order of sums
        cfg = make_config("awq")
        cfg.device = "fakegpu"
        assert smash_folder(folder, cfg, Path(tmp) / "awq", stream=True, progress=False, verbose=False).blocks == 2


@_case
def distiller_follows_the_student() -> None:
    """A distiller's loss buffers and connectors move to the student's device when it is prepared."""
    from slimkit.training.distill import ConfigurableDistiller

    dev = _device()
    student, teacher = torch.nn.Sequential(torch.nn.Linear(4, 4)).to(dev), torch.nn.Sequential(torch.nn.Linear(4, 4))
    distiller = ConfigurableDistiller(
        student_recorders={"s": dict(type="ModuleOutputs", source="0")},
        teacher_recorders={"t": dict(type="ModuleOutputs", source="0")},
        distill_losses={"crd": dict(type="CRDLoss", neg_num=8, sample_n=20, dim_out=4)},
        connectors={"c": dict(type="LinearConnector", in_features=4, out_features=4)},
        loss_forward_mappings={"crd": dict(s_feats=dict(from_student=True, recorder="s", connector="c"),
                                           t_feats=dict(from_student=False, recorder="t"),
                                           data_samples=dict(from_student=True, recorder="s"))})
    distiller.prepare(student, teacher)
    placed = {name: t.device for name, t in distiller.state_dict().items()}
    assert placed and set(placed.values()) == {dev}, placed
    assert teacher[0].weight.device.type == "cpu"  # the teacher is not the distiller's to move


def _harness(tester_name: str) -> None:
    from tests.algorithms.test_algorithms import TESTERS
    from tests.algorithms.test_algorithms_cuda import smash_save_load_on

    _device()
    tester = next(t for t in TESTERS if t.__name__ == tester_name)
    with tempfile.TemporaryDirectory() as tmp:
        smash_save_load_on("fakegpu", tester, tester.models[0], Path(tmp))


@_case
def channel_energy_llama() -> None:
    """Issue 32 (b): channel-energy pruning of tiny_llama through the harness."""
    _harness("TestChannelEnergyLlama")


@_case
def dynamic_batch_packed() -> None:
    """Issue 32 (c): packed dynamic batching of tiny_sentence_encoder through the harness, and callers' CPU ids."""
    from slimkit.engines.batching.packing import Packer
    from tests.algorithms.models import tiny_sentence_encoder

    _harness("TestDynamicBatchPacked")
    dev = _device()
    encoder = tiny_sentence_encoder().eval()
    ids = [torch.arange(1, 6), torch.arange(7, 10)]
    with torch.no_grad():
        expected = torch.cat([encoder(input_ids=i[None]) for i in ids])
        packed = Packer(encoder.to(dev)).run([[(i, None) for i in ids]])[0]  # ids on the CPU: packs follow the model
    assert packed.device == dev
    torch.testing.assert_close(packed.cpu(), expected, atol=2e-6, rtol=0)


@_case
def spos_search() -> None:
    """Issue 32 (d): SPOS search on digits_cnn (its channel importance summed on the weights' device)."""
    _harness("TestSposSearch")


#: the other harness testers that run on CUDA, each on the fake device too (slow: about a minute together)
#: the cases above, torch.compile (Dynamo traces a tensor subclass itself: fakegpu is no compile backend) and
#: optimum-quanto, whose QTensors are tensor subclasses that flatten their inner tensors: on fakegpu those inner
#: tensors are fakegpu's own Python tensors, which flatten again (state-dict keys gain ``.cpu_data``, and its
#: activation QTensors reach bmm as a CPU tensor), so the fake device cannot judge quanto; it runs on CUDA instead
_LEFT_OUT = {"TestChannelEnergyLlama", "TestDynamicBatchPacked", "TestSposSearch", "TestTorchCompile",
             "TestQuanto", "TestQuantoActivations", "TestQuantoInt4"}
SWEEP = sorted(f"harness_{n}" for n in {param.values[0].__name__ for param in _cuda_cases()} - _LEFT_OUT)


def _run(name: str) -> None:
    if name.startswith("harness_"):
        _harness(name.removeprefix("harness_"))
    else:
        CASES[name]()


def main(names: list[str]) -> None:
    """Run the cases ``names`` in this process and print ``{name: error or None}`` as one JSON line."""
    torch.set_num_threads(1)
    errors: dict[str, str | None] = {}
    for name in names:
        try:
            _run(name)
            errors[name] = None
        except BaseException:  # noqa: BLE001  (every case reports, whatever it raised)
            errors[name] = traceback.format_exc()[-6000:]
    print(json.dumps(errors), flush=True)


@pytest.fixture(scope="module")
def fake_device_errors(request: pytest.FixtureRequest) -> dict[str, str | None]:
    """Run the selected cases in one child process (see the module doc) and return its errors by case."""
    selected = [item.callspec.params["name"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")]
    child = subprocess.run([sys.executable, "-m", "tests.test_fake_device", *selected], capture_output=True,
                           text=True, timeout=1800, cwd=Path(__file__).resolve().parents[1])
    lines = child.stdout.strip().splitlines()
    assert child.returncode == 0 and lines, f"the child process failed ({child.returncode}):\n{child.stderr[-4000:]}"
    return json.loads(lines[-1])


@pytest.mark.parametrize("name", [*CASES, *(pytest.param(n, marks=pytest.mark.slow) for n in SWEEP)])
def test_on_the_fake_device(name: str, fake_device_errors: dict[str, str | None]) -> None:
    assert name in fake_device_errors, f"case {name} did not run in the child process"
    assert fake_device_errors[name] is None, f"{name} failed on the fakegpu device:\n{fake_device_errors[name]}"


if __name__ == "__main__":
    main(sys.argv[1:])
