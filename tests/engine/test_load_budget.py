"""A save whose record claims huge layers is refused before anything is allocated (checked on the meta device)."""

from __future__ import annotations

import json
import resource
import time

import pytest
import torch
import transformers

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.errors import SaveLoadError


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _edit(file, edit):
    payload = json.loads(file.read_text())
    edit(payload)
    file.write_text(json.dumps(payload))


@pytest.mark.parametrize("algorithm, edit", [
    ("rtn", lambda p: p["applied"][0]["state"]["layers"]["fc1"].update(out_features=2**40)),
    ("rtn", lambda p: p["applied"][0]["state"]["layers"]["fc2"].update(in_features=10**11, group_size=10**11)),
    ("int8_dynamic", lambda p: p["base"]["kwargs"].update(hidden_features=10**9)),
    ("half", lambda p: p["base"]["kwargs"].update(in_features=10**10)),
])
def test_absurd_sizes_in_the_record_are_refused_not_allocated(tmp_path, algorithm, edit):
    mlp, x = zoo.load("mlp")
    smashed = smash(mlp, SmashConfig([algorithm], device="cpu"), verbose=False)
    smashed.save_pretrained(tmp_path / "m")
    _edit(tmp_path / "m" / "smash_config.json", edit)
    before = _peak_mib()
    with pytest.raises(SaveLoadError, match=r"describes a model of [\d.]+ MiB .* holds only [\d.]+ MiB"):
        SmashedModel.from_pretrained(tmp_path / "m")
    assert _peak_mib() - before < 100


@pytest.mark.parametrize("field, words", [("vocab_size", "MiB"), ("num_hidden_layers", "tensors")])
def test_absurd_hf_config_is_refused_and_a_true_one_loads(tmp_path, field, words):
    config = transformers.LlamaConfig(hidden_size=16, intermediate_size=32, num_attention_heads=2,
                                      num_key_value_heads=1, num_hidden_layers=1, vocab_size=32)
    smashed = smash(transformers.LlamaForCausalLM(config).eval(), SmashConfig(["int8_dynamic"], device="cpu"),
                    verbose=False)
    smashed.save_pretrained(tmp_path / "m")
    assert SmashedModel.from_pretrained(tmp_path / "m").config.vocab_size == 32
    _edit(tmp_path / "m" / "smash_config.json", lambda p: p["base"]["config"].update({field: 2**31}))
    before, start = _peak_mib(), time.perf_counter()
    with pytest.raises(SaveLoadError, match=f"holds only [\\d.]+ {words}"):
        SmashedModel.from_pretrained(tmp_path / "m")
    # 2**31 layers: the meta build stops at the first layers past the file's tensor count, not after minutes
    assert _peak_mib() - before < 100 and time.perf_counter() - start < 10


def test_model_argument_is_budgeted_on_a_meta_copy_and_left_untouched(tmp_path):
    mlp, x = zoo.load("mlp")
    smash(mlp, SmashConfig(["rtn"], device="cpu"), verbose=False).save_pretrained(tmp_path / "m")
    _edit(tmp_path / "m" / "smash_config.json",
          lambda p: p["applied"][0]["state"]["layers"]["fc3"].update(out_features=2**38))
    fresh = zoo.build("mlp")
    weight = fresh.fc3.weight.clone()
    with pytest.raises(SaveLoadError, match="holds only"):
        SmashedModel.from_pretrained(tmp_path / "m", model=fresh)
    assert isinstance(fresh.fc3, torch.nn.Linear) and torch.equal(fresh.fc3.weight, weight)
