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
from slimkit.utils import main_tensor, run_model
from tests.algorithms.models import get_model
from tests.algorithms.test_algorithms import TESTERS, _config
from tests.algorithms.testers.base import AlgorithmTesterBase

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _to(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_to(v, device) for v in value)
    return value


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


@pytest.mark.parametrize(("tester", "model_name"), _cuda_cases())
def test_smash_save_load_on_cuda(tester: type[AlgorithmTesterBase], model_name: str, tmp_path: Path) -> None:
    base, inputs, factory = get_model(model_name)
    base.eval()
    gpu_inputs = _to(inputs, "cuda")
    cfg = _config(tester, inputs)
    cfg.device = "cuda"

    smashed = smash(base, cfg, verbose=False)
    params = list(smashed.parameters())
    assert all(p.is_cuda for p in params), [n for n, p in smashed.named_parameters() if not p.is_cuda][:5]
    out = _output(smashed, gpu_inputs)
    assert out.is_cuda and torch.isfinite(out.float()).all()
    tester().post_smash_hook(smashed, base.to("cuda"), gpu_inputs)  # smash left the input model on the CPU

    smashed.save_pretrained(tmp_path / "saved")
    reloaded = SmashedModel.from_pretrained(tmp_path / "saved", model=factory, device="cuda")
    again = _output(reloaded, gpu_inputs)
    assert again.is_cuda
    torch.testing.assert_close(again.float(), out.float(), atol=max(tester.reload_atol, 1e-5), rtol=0)
