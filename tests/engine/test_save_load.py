from __future__ import annotations

import json
import os

import pytest
import torch
import transformers

from slimkit import SmashConfig, SmashedModel, smash
from slimkit.errors import SaveLoadError


class Custom(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def custom():
    torch.manual_seed(0)
    return Custom()


@pytest.fixture
def saved(tmp_path):
    smashed = smash(custom(), SmashConfig(["int8_dynamic"], device="cpu"), verbose=False)
    smashed.save_pretrained(tmp_path / "m")
    return smashed, tmp_path / "m"


def test_hf_model_rebuilt_from_its_config_without_model_argument(tmp_path):
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=1, vocab_size=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 64, (2, 10))
    smashed = smash(model, SmashConfig({"level": {"sparsity": 0.3}}, device="cpu"), verbose=False)
    smashed.save_pretrained(tmp_path / "llama")
    payload = json.loads((tmp_path / "llama" / "smash_config.json").read_text())
    assert payload["base"]["kind"] == "hf" and payload["base"]["hf_class"] == "LlamaForCausalLM"
    again = SmashedModel.from_pretrained(tmp_path / "llama")
    assert torch.equal(again(ids).logits, smashed(ids).logits)
    assert again.config.vocab_size == 64  # attribute passthrough to the HF model


def test_zoo_model_rebuilt_by_name(tmp_path):
    from slimkit import zoo

    model, x = zoo.load("mlp")
    smashed = smash(model, SmashConfig(["half"], device="cpu"), verbose=False)
    smashed.save_pretrained(tmp_path / "z")
    again = SmashedModel.from_pretrained(tmp_path / "z")
    assert torch.equal(again(x), smashed(x))


def test_user_model_needs_model_argument_and_accepts_instance_or_factory(saved):
    smashed, path = saved
    x = torch.randn(3, 8)
    with pytest.raises(SaveLoadError, match="built by your own code .*Pass model=<a fresh instance>"):
        SmashedModel.from_pretrained(path)
    assert torch.equal(SmashedModel.from_pretrained(path, model=custom)(x), smashed(x))
    assert torch.equal(SmashedModel.from_pretrained(path, model=Custom())(x), smashed(x))


def test_int8_file_is_about_four_times_smaller_than_fp32(tmp_path):
    def wide():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))

    smash(wide(), SmashConfig(["int8_dynamic"], device="cpu"), verbose=False).save_pretrained(tmp_path / "int8")
    smash(wide(), SmashConfig(device="cpu"), verbose=False).save_pretrained(tmp_path / "fp32")
    ratio = os.path.getsize(tmp_path / "int8" / "model.safetensors") / os.path.getsize(
        tmp_path / "fp32" / "model.safetensors")
    assert 0.24 < ratio < 0.30, ratio


def test_wrong_architecture_is_a_clear_error(saved):
    _, path = saved
    with pytest.raises(SaveLoadError, match="do not fit the rebuilt architecture"):
        SmashedModel.from_pretrained(path, model=lambda: torch.nn.Sequential(torch.nn.Linear(8, 4)))


def test_missing_directory_and_files_are_named(saved, tmp_path):
    _, path = saved
    with pytest.raises(SaveLoadError, match="No saved model at .*nowhere: the directory does not exist"):
        SmashedModel.from_pretrained(tmp_path / "nowhere")
    (path / "model.safetensors").unlink()
    with pytest.raises(SaveLoadError, match=r"model.safetensors is missing"):
        SmashedModel.from_pretrained(path, model=custom)
    (path / "smash_config.json").unlink()
    with pytest.raises(SaveLoadError, match=r"smash_config.json is missing"):
        SmashedModel.from_pretrained(path, model=custom)


def test_truncated_files_are_named(saved):
    _, path = saved
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(SaveLoadError, match=r"model.safetensors cannot be read .*truncated or corrupt"):
        SmashedModel.from_pretrained(path, model=custom)
    cfg = path / "smash_config.json"
    cfg.write_text(cfg.read_text()[:50])
    with pytest.raises(SaveLoadError, match=r"smash_config.json is not valid JSON"):
        SmashedModel.from_pretrained(path, model=custom)


class Opaque(torch.nn.Module):
    """Holds a non-tensor in its state dict: safetensors cannot store it."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def get_extra_state(self):
        return {"note": "python object"}

    def set_extra_state(self, state):
        self.note = state["note"]

    def forward(self, x):
        return self.fc(x)


def test_pickle_only_with_explicit_permission_on_both_sides(tmp_path):
    smashed = smash(Opaque(), SmashConfig(["level"], device="cpu"), verbose=False)
    with pytest.raises(SaveLoadError, match="never pickles by default; pass allow_pickle=True"):
        smashed.save_pretrained(tmp_path / "p")
    assert not (tmp_path / "p").exists()  # nothing half-written
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".p")]  # temp dir cleaned up
    smashed.save_pretrained(tmp_path / "p", allow_pickle=True)
    assert (tmp_path / "p" / "model.pt").exists()
    with pytest.raises(SaveLoadError, match="is a pickle file, which can run arbitrary code"):
        SmashedModel.from_pretrained(tmp_path / "p")
    again = SmashedModel.from_pretrained(tmp_path / "p", allow_pickle=True)
    x = torch.randn(2, 4)
    assert torch.equal(again(x), smashed(x))


def test_save_refuses_to_clobber_foreign_directory(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "thesis.tex").write_text("precious")
    smashed = smash(custom(), SmashConfig(device="cpu"), verbose=False)
    with pytest.raises(SaveLoadError, match="not an earlier slimkit save"):
        smashed.save_pretrained(target)
    assert (target / "thesis.tex").read_text() == "precious"


def test_resave_replaces_an_earlier_save(saved):
    smashed, path = saved
    other = smash(custom(), SmashConfig(["half"], device="cpu"), verbose=False)
    other.save_pretrained(path)
    again = SmashedModel.from_pretrained(path, model=custom)
    assert again.algorithms == ["half"]
    assert sorted(os.listdir(path.parent)) == ["m"]  # no leftovers from the swap


def test_saved_json_records_applied_algorithms_in_order(tmp_path):
    cfg = SmashConfig({"level": {"sparsity": 0.2}, "int8_dynamic": {"per_channel": False}}, device="cpu")
    smash(custom(), cfg, verbose=False).save_pretrained(tmp_path / "o")
    payload = json.loads((tmp_path / "o" / "smash_config.json").read_text())
    assert [a["name"] for a in payload["applied"]] == ["level", "int8_dynamic"]
    assert abs(payload["applied"][0]["state"]["zero_fraction"] - 0.2) < 0.01
    assert payload["hyperparameters"]["int8_dynamic_per_channel"] is False


def test_reapply_algorithms_run_again_on_load(tmp_path):
    """A REAPPLY algorithm's change lives outside the weights (here a forward hook); reload must redo it."""
    from tests.engine.fakes import make, registered

    def _apply(self, model, smash_config):
        model.register_forward_hook(lambda module, args, out: out * 2)
        return model

    doubler = make("fake_doubler", "cacher", _apply=_apply)  # cachers default to SaveFn.REAPPLY
    with registered(doubler):
        smashed = smash(custom(), SmashConfig(["fake_doubler"], device="cpu"), verbose=False)
        x = torch.randn(2, 8)
        assert torch.allclose(smashed(x), 2 * custom()(x))
        smashed.save_pretrained(tmp_path / "r")
        again = SmashedModel.from_pretrained(tmp_path / "r", model=custom)
        assert torch.equal(again(x), smashed(x))
