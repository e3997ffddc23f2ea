"""save_fn=ARTIFACTS: an algorithm saves its own files instead of torch weights, and loads without a base model."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.core.contract import SaveFn, SlimkitAlgorithm
from slimkit.errors import RegistryError, SaveLoadError
from tests.engine.fakes import make, registered


class Frozen(torch.nn.Module):
    """What the fake compiler produces: a matrix product that owes nothing to the base model's class."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", weight)
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.T + self.bias


def _freeze(self, model, smash_config):
    lin = model.lin
    return Frozen(lin.weight.detach().clone(), lin.bias.detach().clone())


def _save_artifacts(self, model, directory, state):
    save_file({"weight": model.weight, "bias": model.bias}, str(directory / "frozen.safetensors"))
    if state.get("fail_after_write"):
        raise OSError("disk full")


def _load_artifacts(self, directory, smash_config, state):
    file = directory / "frozen.safetensors"
    if not file.is_file():
        raise SaveLoadError(f"{file} is missing")
    tensors = load_file(str(file))
    return Frozen(tensors["weight"], tensors["bias"])


def _fake_compiler(**attrs) -> type[SlimkitAlgorithm]:
    body = {"save_fn": SaveFn.ARTIFACTS, "_apply": _freeze, "save_artifacts": _save_artifacts,
            "load_artifacts": _load_artifacts, "compatible_algorithms": {"batcher": []}, **attrs}
    return make("fake_freeze", "compiler", **body)


class UserLinear(torch.nn.Module):
    """A user-defined model: slimkit cannot rebuild it, so only ARTIFACTS saves load without model=."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def _smash(**hyper) -> SmashedModel:
    cfg = SmashConfig(device="cpu")
    cfg["compiler"] = "fake_freeze"
    for key, value in hyper.items():
        cfg[key] = value
    return smash(UserLinear(), cfg, verbose=False)


def test_artifacts_replace_the_weights_and_load_without_the_base_model(tmp_path):
    x = torch.randn(4, 6)
    with registered(_fake_compiler()):
        cfg = SmashConfig({"level": {"sparsity": 0.5}}, device="cpu")
        cfg["compiler"] = "fake_freeze"
        smashed = smash(UserLinear(), cfg, verbose=False)
        assert smashed.saved_before is None and smashed._pre_apply_model is None  # no fp32 copy kept for saving
        smashed.save_pretrained(tmp_path / "a")
        assert sorted(os.listdir(tmp_path / "a")) == ["README.md", "frozen.safetensors", "smash_config.json"]
        payload = json.loads((tmp_path / "a" / "smash_config.json").read_text())
        assert payload["weights_format"] == "artifacts" and payload["artifacts"] == 1
        assert [a["save_fn"] for a in payload["applied"]] == ["keep", "artifacts"]
        again = SmashedModel.from_pretrained(tmp_path / "a")  # UserLinear is never rebuilt
        assert again.algorithms == ["level", "fake_freeze"] and again.applied == smashed.applied
        assert isinstance(again.model, Frozen) and not again.model.training
        assert (again.model.weight == 0).sum() == 9  # the pruner's zeros came through the artifact
        assert torch.equal(again(x), smashed(x))
        assert SmashConfig.from_json(tmp_path / "a") == cfg


def test_a_failing_save_artifacts_leaves_the_earlier_save_untouched(tmp_path):
    with registered(_fake_compiler()):
        _smash().save_pretrained(tmp_path / "b")
        before = (tmp_path / "b" / "frozen.safetensors").read_bytes()
        broken = _smash()
        broken.applied[-1]["state"]["fail_after_write"] = True
        with pytest.raises(OSError, match="disk full"):
            broken.save_pretrained(tmp_path / "b")
        assert sorted(os.listdir(tmp_path)) == ["b"]  # no temp directory left behind
        assert (tmp_path / "b" / "frozen.safetensors").read_bytes() == before


def test_the_artifacts_algorithm_loads_its_own_files_and_names_missing_ones(tmp_path):
    with registered(_fake_compiler()):
        _smash().save_pretrained(tmp_path / "c")
        (tmp_path / "c" / "frozen.safetensors").unlink()
        with pytest.raises(SaveLoadError, match=r"frozen\.safetensors is missing"):
            SmashedModel.from_pretrained(tmp_path / "c")


def test_an_edited_artifacts_index_is_refused(tmp_path):
    with registered(_fake_compiler()):
        _smash().save_pretrained(tmp_path / "d")
        file = tmp_path / "d" / "smash_config.json"
        payload = json.loads(file.read_text())
        payload["artifacts"] = 5
        file.write_text(json.dumps(payload))
        with pytest.raises(SaveLoadError, match=r"has 'artifacts': 5, expected 0 .*Save the model again"):
            SmashedModel.from_pretrained(tmp_path / "d")


def test_an_algorithm_that_no_longer_saves_artifacts_is_refused(tmp_path):
    with registered(_fake_compiler()):
        _smash().save_pretrained(tmp_path / "e")
    with registered(_fake_compiler(save_fn=SaveFn.REAPPLY)):
        with pytest.raises(SaveLoadError, match=r"fake_freeze saves as 'reapply', not 'artifacts'"):
            SmashedModel.from_pretrained(tmp_path / "e")


def test_an_algorithm_applied_after_the_artifacts_one_cannot_be_saved(tmp_path):
    with registered(_fake_compiler()):
        smashed = _smash()
        smashed.applied.append({"name": "half", "group": "quantizer", "save_fn": "replay", "state": {}})
        with pytest.raises(SaveLoadError, match="fake_freeze saves the final model as its own files, but half ran"):
            smashed.save_pretrained(tmp_path / "f")
        assert not (tmp_path / "f").exists()


def test_registry_requires_the_methods_and_no_later_group():
    with pytest.raises(RegistryError, match=r"save_fn=ARTIFACTS needs save_artifacts\(\)"):
        with registered(make("fake_freeze", "compiler", save_fn=SaveFn.ARTIFACTS,
                             compatible_algorithms={"batcher": []})):
            pass
    with pytest.raises(RegistryError, match=r"no algorithm may run after it; .*later groups batcher"):
        with registered(_fake_compiler(compatible_algorithms={})):
            pass


def test_saves_from_before_artifacts_still_load_by_exporting_again(tmp_path):
    """An onnxruntime save written as torch weights + saved_before=0 (the earlier format) re-exports on load."""
    model, inputs = zoo.load("mlp")
    cfg = SmashConfig(device="cpu")
    cfg.add_example_inputs(inputs)
    smash(model, cfg, verbose=False).save_pretrained(tmp_path / "old")
    file = tmp_path / "old" / "smash_config.json"
    payload = json.loads(file.read_text())
    payload["algorithms"] = {"compiler": "onnxruntime"}
    payload["hyperparameters"] = {"onnxruntime_threads": 1}
    payload["applied"] = [{"name": "onnxruntime", "group": "compiler", "save_fn": "save_before_apply",
                           "state": {}, "seconds": 1.0}]
    payload["saved_before"] = 0
    file.write_text(json.dumps(payload))
    again = SmashedModel.from_pretrained(tmp_path / "old")
    assert type(again.model).__name__ == "OnnxRuntimeModule"
    with torch.no_grad():
        torch.testing.assert_close(again(inputs), model(inputs), atol=1e-5, rtol=1e-4)
