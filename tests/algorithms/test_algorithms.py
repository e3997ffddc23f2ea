"""The one harness (DESIGN.md §5): every tester × model goes smash -> forward -> hook -> save -> load -> compare."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
from pathlib import Path

import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash
from slimkit.core import registry
from slimkit.core.weights import find_targets
from slimkit.errors import ModelNotSupportedError
from slimkit.utils import main_tensor, run_model
from tests.algorithms import testers
from tests.algorithms.models import get_model
from tests.algorithms.testers.base import AlgorithmTesterBase


def _all_testers() -> list[type[AlgorithmTesterBase]]:
    found = []
    for info in pkgutil.iter_modules(testers.__path__):
        module = importlib.import_module(f"tests.algorithms.testers.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            own = obj.__module__ == module.__name__
            if issubclass(obj, AlgorithmTesterBase) and obj is not AlgorithmTesterBase and own:
                found.append(obj)
    return sorted(found, key=lambda c: c.__name__)


TESTERS = _all_testers()


def _cases(attr: str) -> list:
    cases = []
    for tester in TESTERS:
        for model in getattr(tester, attr):
            marks = [getattr(pytest.mark, m) for m in tester.marks]
            cases.append(pytest.param(tester, model, id=f"{tester.__name__}-{model}", marks=marks))
    return cases


def _config(tester: type[AlgorithmTesterBase], inputs=None) -> SmashConfig:
    cfg = SmashConfig(device=tester.device)
    if inputs is not None:
        cfg.add_example_inputs(inputs)
    prepare = getattr(tester, "prepare_config", None)
    if prepare is not None:  # testers add components their algorithm needs (tokenizer, data...)
        prepare(cfg)
    for key, value in tester.extra_config.items():
        cfg[key] = value
    cfg.activate(tester.algorithm)
    for key, value in tester.hyperparameters.items():
        cfg[f"{tester.algorithm}_{key}"] = value
    return cfg


def _check_coverage(smashed: SmashedModel, base: torch.nn.Module, algorithm: str, saved: Path) -> dict:
    """A weight quantizer records its coverage: consistent numbers, a reason for every layer left, saved as JSON."""
    record = smashed.coverage[algorithm]
    targets = find_targets(base)  # the base model is untouched by smash: what coverage is measured against
    assert record["linear_like_params"] == sum(t.numel for t in targets)
    assert record["quantized_params"] + sum(x["params"] for x in record["left"]) == record["linear_like_params"]
    assert {x["name"] for x in record["left"]} <= {t.name for t in targets}
    assert all(x["reason"] for x in record["left"])
    assert 0.0 <= record["share"] <= record["share_not_excluded"] <= 1.0
    payload = json.loads((saved / "smash_config.json").read_text())
    assert [a["state"]["coverage"] for a in payload["applied"] if a["name"] == algorithm] == [record]
    return record


def _output(model, inputs, tester: type[AlgorithmTesterBase] | None = None) -> torch.Tensor:
    with torch.no_grad():
        if tester is not None and tester.generate_kwargs is not None:  # token ids of a decoder without logits
            return model.generate(**inputs, **tester.generate_kwargs).float()
        return main_tensor(run_model(model, inputs)).float()


@pytest.mark.parametrize(("tester", "model_name"), _cases("models"))
def test_smash_save_load(tester: type[AlgorithmTesterBase], model_name: str, tmp_path: Path) -> None:
    base, inputs, factory = get_model(model_name)
    base.eval()
    base_out = _output(base, inputs, tester)
    cfg = _config(tester, inputs)

    smashed = smash(base, cfg, verbose=False)
    assert isinstance(smashed, SmashedModel) and tester.algorithm in smashed.algorithms
    out = _output(smashed, inputs, tester)
    assert out.shape == base_out.shape and torch.isfinite(out).all()
    tester().post_smash_hook(smashed, base, inputs)

    smashed.save_pretrained(tmp_path / "saved")
    files = sorted(os.listdir(tmp_path / "saved"))
    assert "smash_config.json" in files
    if not tester.allow_pickle_files:
        assert not any(f.endswith((".pt", ".pth", ".pkl", ".bin")) for f in files), files
    if registry.get(tester.algorithm).group == "quantizer":  # every weight quantizer says what it covered
        _check_coverage(smashed, base, tester.algorithm, tmp_path / "saved")
    reloaded = SmashedModel.from_pretrained(tmp_path / "saved", model=factory)
    assert reloaded.algorithms == smashed.algorithms
    assert reloaded.coverage == smashed.coverage
    torch.testing.assert_close(_output(reloaded, inputs, tester), out, atol=tester.reload_atol, rtol=0)

    again = SmashConfig.from_json(tmp_path / "saved")
    assert again == cfg
    assert again.example_inputs is not None


@pytest.mark.parametrize(("tester", "model_name"), _cases("reject_models"))
def test_model_check_rejects(tester: type[AlgorithmTesterBase], model_name: str) -> None:
    model, inputs, _ = get_model(model_name)
    algo = registry.get(tester.algorithm)()
    assert not algo.model_check_fn(model)
    if isinstance(model, torch.nn.Module):
        with pytest.raises(ModelNotSupportedError, match=f"{tester.algorithm} does not support this model"):
            smash(model, _config(tester, inputs), verbose=False)


def test_every_registered_algorithm_has_a_tester() -> None:
    tested = {t.algorithm for t in TESTERS}
    missing = sorted(set(registry.names()) - tested)
    assert not missing, f"registered algorithms without a tester in tests/algorithms/testers: {missing}"


def test_every_tester_has_models_and_rejects() -> None:
    for tester in TESTERS:
        assert tester.algorithm in registry.names(), tester
        assert tester.models, f"{tester.__name__} runs on no model"
        assert tester.post_smash_hook is not AlgorithmTesterBase.post_smash_hook, f"{tester.__name__} has no hook"
        assert tester.reject_models, f"{tester.__name__} names no model its algorithm must refuse"
