"""``<algorithm>_teacher_ckpt``: distil from a saved model (slimkit save or HF folder) instead of the input."""

from __future__ import annotations

import pytest
import torch

from slimkit import SmashConfig, smash, zoo
from slimkit.core import registry
from slimkit.engine.teacher import load_teacher, takes_teacher
from slimkit.errors import ConfigError
from slimkit.utils import model_device


def _capture(monkeypatch, name: str) -> list:
    seen: list = []

    def fake_apply(self, model, smash_config):
        seen.append(getattr(smash_config, "teacher", "absent"))
        return model

    monkeypatch.setattr(registry.get(name), "_apply", fake_apply)
    return seen


@pytest.fixture(scope="module")
def digits_save(tmp_path_factory):
    """A slimkit save of the digits CNN with 90% of its weights zeroed (a teacher unlike the dense model)."""
    folder = tmp_path_factory.mktemp("teacher") / "digits_level"
    cfg = SmashConfig({"level": {"sparsity": 0.9}})
    smashed = smash(zoo.load("digits_cnn").model, cfg, verbose=False)
    smashed.save_pretrained(folder)
    return folder, smashed.model


def test_the_distilling_algorithms_take_a_teacher_ckpt():
    assert [n for n in ("kd_recover", "layer_drop", "width_distill", "finetune") if takes_teacher(n)] == [
        "kd_recover", "layer_drop", "width_distill"]


@pytest.mark.parametrize("name", ["kd_recover", "width_distill"])
def test_smash_hands_the_saved_model_over_as_the_teacher(monkeypatch, digits_save, name):
    folder, saved = digits_save
    seen = _capture(monkeypatch, name)
    cfg = SmashConfig([name])
    cfg.add_data("Digits")
    cfg[f"{name}_teacher_ckpt"] = str(folder)
    smash(zoo.load("digits_cnn").model, cfg, verbose=False)
    teacher = seen[0]
    assert not teacher.training
    x = zoo.load("digits_cnn").example_inputs
    with torch.no_grad():
        torch.testing.assert_close(teacher(x.to(model_device(teacher))).cpu(), saved(x.to(model_device(saved))).cpu())
    cfg[f"{name}_teacher_ckpt"] = ""  # unset: no teacher handed over, the algorithm uses its default
    smash(zoo.load("digits_cnn").model, cfg, verbose=False)
    assert seen[1] is None


def test_kd_recover_learns_from_the_checkpoint_not_the_input(digits_save):
    folder, _ = digits_save
    parts = []
    for ckpt in ("", str(folder)):
        cfg = SmashConfig({"kd_recover": {"steps": 2, "task_weight": 0.0, "num_threads": 1, "teacher_ckpt": ckpt}})
        cfg.add_data("Digits")
        parts.append(smash(zoo.load("digits_cnn").model, cfg, verbose=False).applied[0]["state"]["last_parts"])
    # the input model teaches itself (only the student's dropout differs); the 90%-sparse checkpoint disagrees
    assert parts[0]["distill.logits"] < 1.0 and parts[1]["distill.logits"] > 10 * parts[0]["distill.logits"]


def test_a_hugging_face_folder_loads_as_the_teacher(tmp_path):
    model = zoo.load("tiny_llama").model
    model.save_pretrained(tmp_path / "hf")
    teacher = load_teacher(str(tmp_path / "hf"), "layer_drop_teacher_ckpt")
    assert type(teacher) is type(model) and not teacher.training
    for key, value in model.state_dict().items():
        assert torch.equal(teacher.state_dict()[key], value), key


def test_bad_teacher_paths_say_what_the_folder_must_hold(tmp_path):
    cfg = SmashConfig({"kd_recover": {"teacher_ckpt": str(tmp_path / "nope")}})
    cfg.add_data("Digits")
    with pytest.raises(ConfigError, match=r"kd_recover_teacher_ckpt'\] = '.*nope': no such folder.*slimkit save "
                                          r"folder.*Hugging Face model folder.*leave cfg\['kd_recover_teacher_ckpt'\]"):
        smash(zoo.load("digits_cnn").model, cfg, verbose=False)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "weights.bin").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"holds neither smash_config.json nor config.json \(found: weights.bin\)"):
        load_teacher(str(tmp_path / "junk"), "kd_recover_teacher_ckpt")
    (tmp_path / "junk" / "smash_config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="the teacher could not be loaded"):
        load_teacher(str(tmp_path / "junk"), "kd_recover_teacher_ckpt")


def test_layer_drop_refuses_a_teacher_of_another_depth_for_hidden_states(tmp_path):
    zoo.load("tiny_llama", num_hidden_layers=3).model.save_pretrained(tmp_path / "deep")
    lm = zoo.load("tiny_llama")
    cfg = SmashConfig({"layer_drop": {"teacher_ckpt": str(tmp_path / "deep"), "steps": 1}})
    cfg.add_tokenizer(lm.tokenizer)
    cfg.add_data("PyDocText")
    with pytest.raises(ConfigError, match=r"teacher has 'model.layers' with 3 blocks, the model 'model.layers' with "
                                          r"2 blocks.*layer_drop_hidden_weight = 0"):
        smash(lm.model, cfg, verbose=False)
