"""smash hands the model as it entered to algorithms that ask for it, without a copy when it already made one."""

from __future__ import annotations

import torch

from slimkit import SmashConfig, smash
from slimkit.core import registry
from tests.training.conftest import make_mlp


def _capture(monkeypatch, name: str) -> list:
    seen: list = []
    cls = registry.get(name)

    def fake_apply(self, model, smash_config):
        seen.append((getattr(smash_config, "original_model", None), model))
        return model

    monkeypatch.setattr(cls, "_apply", fake_apply)
    return seen


def _cfg() -> SmashConfig:
    cfg = SmashConfig()
    cfg.add_data("Digits")
    return cfg


def test_kd_recover_gets_the_callers_model_itself_when_smash_copies(monkeypatch):
    seen = _capture(monkeypatch, "kd_recover")
    model = make_mlp()
    cfg = _cfg()
    cfg["recoverer"] = "kd_recover"
    smash(model, cfg, verbose=False)
    original, smashed = seen[0]
    assert original is model and smashed is not model  # no extra copy: the caller's model is the original


def test_in_place_smash_keeps_one_copy_of_the_original(monkeypatch):
    seen = _capture(monkeypatch, "kd_recover")
    model = make_mlp()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = _cfg()
    cfg["recoverer"] = "kd_recover"
    smash(model, cfg, verbose=False, copy_model=False)
    original, smashed = seen[0]
    assert smashed is model and original is not model
    for key, value in original.state_dict().items():
        assert torch.equal(value, weights[key])


def test_algorithms_that_do_not_ask_see_no_original(monkeypatch):
    seen = _capture(monkeypatch, "finetune")
    cfg = _cfg()
    cfg["recoverer"] = "finetune"
    smash(make_mlp(), cfg, verbose=False)
    assert seen[0][0] is None
