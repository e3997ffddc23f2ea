"""The harness on a GPU: every algorithm that declares ``run_on_cuda`` smashes, acts, saves and reloads on CUDA.

Skipped (reported) without a GPU, like every ``cuda`` test. Each tester runs on its first model; the smashed
model's parameters and outputs must live on the GPU, the tester's hook must hold there too, and the reloaded
model (loaded back onto CUDA) must give the smashed outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from slimkit import SmashedModel, smash
from slimkit.core import registry
from slimkit.core.contract import GROUPS
from slimkit.errors import MissingPackageError
from slimkit.utils import main_tensor, move_inputs, run_model
from tests.algorithms.models import get_model
from tests.algorithms.test_algorithms import TESTERS, _config
from tests.algorithms.testers.base import AlgorithmTesterBase

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _cuda_cases() -> list:
    cases = []
    for tester in TESTERS:
        names = [tester.algorithm] + [v for k, v in tester.extra_config.items() if k in GROUPS and v]
        if not all(registry.get(n).run_on_cuda for n in names) or "llamacpp" in tester.marks:
            continue
        marks = [getattr(pytest.mark, m) for m in tester.marks]
        cases.append(pytest.param(tester, tester.models[0], id=f"{tester.__name__}-{tester.models[0]}", marks=marks))
    return cases


def _output(model: Any, inputs: Any) -> torch.Tensor:
    with torch.no_grad():
        return main_tensor(run_model(model, inputs))


def smash_save_load_on(device: str, tester: type[AlgorithmTesterBase], model_name: str, tmp_path: Path) -> None:
    """The harness on ``device``: smash there, every parameter and the output there, hook, save, reload there."""
    try:
        base, inputs, factory = get_model(model_name)
    except MissingPackageError as exc:  # a zoo model whose weights ship in a package (too big to carry to a GPU)
        pytest.skip(f"{model_name}: {exc}")
    base.eval()
    device_inputs = move_inputs(inputs, device)
    kind = torch.device(device).type
    cfg = _config(tester, inputs)
    cfg.device = device

    try:
        smashed = smash(base, cfg, verbose=False)
    except MissingPackageError as exc:  # an optional library this machine lacks (a GPU image carries few)
        pytest.skip(f"{tester.algorithm}: {exc}")
    elsewhere = [n for n, p in smashed.named_parameters() if p.device.type != kind]
    assert not elsewhere, elsewhere[:5]
    out = _output(smashed, device_inputs)
    assert out.device.type == kind and torch.isfinite(out.float()).all()
    tester().post_smash_hook(smashed, base.to(device), device_inputs)  # smash left the input model on the CPU

    smashed.save_pretrained(tmp_path / "saved")
    reloaded = SmashedModel.from_pretrained(tmp_path / "saved", model=factory, device=device)
    again = _output(reloaded, device_inputs)
    assert again.device.type == kind
    torch.testing.assert_close(again.float(), out.float(), atol=max(tester.reload_atol, 1e-5), rtol=0)


@pytest.mark.parametrize(("tester", "model_name"), _cuda_cases())
def test_smash_save_load_on_cuda(tester: type[AlgorithmTesterBase], model_name: str, tmp_path: Path) -> None:
    smash_save_load_on("cuda", tester, model_name, tmp_path)
