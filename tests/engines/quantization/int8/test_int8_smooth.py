from __future__ import annotations

import re

import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.data import make_datamodule
from slimkit.engines.quantization.int8.emulation import emulate_avx2
from slimkit.engines.quantization.int8.linear import (
    FORCE_ENV,
    FULL_RANGE,
    SATURATION_SAFE,
    Int8Linear,
    choose_path,
    cpu_int8_capability,
    full_range_is_exact,
)
from slimkit.errors import DataError
from slimkit.evaluation import fidelity


def _mlp_data(n: int = 24):
    torch.manual_seed(0)
    items = [{"x": torch.randn(32), "label": i % 10} for i in range(n)]

    def collate(batch):
        return torch.stack([b["x"] for b in batch]), torch.tensor([b["label"] for b in batch])

    return make_datamodule((items, items[:4], items[:4]), collate_fn=collate)


def test_calibrates_on_the_configs_data_first():
    model, inputs = zoo.load("mlp")
    cfg = SmashConfig({"int8_smooth": {"calibration_samples": 20}}, device="cpu")
    cfg.data = _mlp_data()
    cfg.add_example_inputs(inputs)
    smashed = smash(model, cfg, verbose=False)
    state = smashed.applied[0]["state"]
    assert state["calibration"] == "data custom"
    assert sorted(state["int8_layers"]) == ["fc1", "fc2", "fc3"]
    assert fidelity(model, smashed, inputs).cosine_mean > 0.99


def test_without_any_calibration_source_the_error_says_how_to_add_one():
    model, _ = zoo.load("mlp")
    with pytest.raises(DataError, match=r"int8_smooth needs calibration inputs.*cfg\.add_data.*add_example_inputs"):
        smash(model, SmashConfig(["int8_smooth"], device="cpu"), verbose=False)


def test_exclude_keeps_layers_fp32_and_out_of_the_budget_search():
    model, inputs = zoo.load("tiny_llama")
    cfg = SmashConfig({"int8_smooth": {"exclude": ["lm_head", "*.mlp.down_proj"]}}, device="cpu")
    cfg.add_example_inputs(inputs)
    smashed = smash(model, cfg, verbose=False)
    state = smashed.applied[0]["state"]
    assert not any(n.endswith(("down_proj", "lm_head")) for n in state["int8_layers"] + state["fp32_layers"])
    assert type(smashed.model.model.layers[0].mlp.down_proj) is torch.nn.Linear
    assert type(smashed.model.lm_head) is torch.nn.Linear


def test_fixed_alpha_smooths_every_verified_group():
    model, inputs = zoo.load("tiny_llama")
    cfg = SmashConfig({"int8_smooth": {"auto_alpha": False, "alpha": 0.6}}, device="cpu")
    cfg.add_example_inputs(inputs)
    state = smash(model, cfg, verbose=False).applied[0]["state"]
    assert {g["alpha"] for g in state["smoothed"]} == {0.6}
    assert len(state["smoothed"]) == 2 * 3  # per layer: input_layernorm, post_attention_layernorm, up_proj


def _smash_mlp(monkeypatch, forced: bool):
    monkeypatch.setenv(FORCE_ENV, "1" if forced else "0")
    model, inputs = zoo.load("mlp")
    cfg = SmashConfig(["int8_smooth"], device="cpu")
    cfg.add_example_inputs(inputs)
    return model, inputs, smash(model, cfg, verbose=False)


@pytest.mark.parametrize("forced", [False, True], ids=["probe", "forced_safe"])
def test_the_save_records_the_recipe_the_probe_or_the_flag_chose(monkeypatch, forced, tmp_path):
    model, inputs, smashed = _smash_mlp(monkeypatch, forced)
    state = smashed.applied[0]["state"]
    expected = SATURATION_SAFE if forced or not full_range_is_exact() else FULL_RANGE
    assert state["int8_path"] == expected and state["cpu_int8"] == cpu_int8_capability()
    layers = [m for m in smashed.model.modules() if type(m) is Int8Linear]
    assert layers and all(m.saturation_safe == (expected == SATURATION_SAFE) for m in layers)
    assert fidelity(model, smashed, inputs).cosine_mean > 0.99
    smashed.save_pretrained(tmp_path / "m")
    again = SmashedModel.from_pretrained(tmp_path / "m")  # same CPU, same flag: the save runs as it was
    assert torch.equal(again(inputs), smashed(inputs))


def test_a_full_range_save_is_requantized_where_it_would_saturate(monkeypatch, tmp_path):
    """On a VNNI CPU: a full-range save loaded with the flag set (as on an AVX2 CPU); on AVX2 the save is already
    saturation-safe and loads exactly."""
    model, inputs, smashed = _smash_mlp(monkeypatch, False)
    smashed.save_pretrained(tmp_path / "m")
    monkeypatch.setenv(FORCE_ENV, "1")
    if smashed.applied[0]["state"]["int8_path"] == FULL_RANGE:
        saved_on = re.escape(smashed.applied[0]["state"]["cpu_int8"])
        with pytest.warns(RuntimeWarning, match=rf"exact \({saved_on}\); on this CPU .* is set, so .* re-quantized"):
            again = SmashedModel.from_pretrained(tmp_path / "m")
        layers = [m for m in again.model.modules() if type(m) is Int8Linear]
        assert layers and all(m.saturation_safe for m in layers)
        for m in layers:
            codes = m.weight().int_repr().long().abs()
            assert int((codes[:, 0::2] + codes[:, 1::2]).max()) <= 128
        assert fidelity(model, again, inputs).cosine_mean > 0.99
        torch.testing.assert_close(emulate_avx2(again.model)(inputs), again(inputs), rtol=0, atol=0)
    else:
        again = SmashedModel.from_pretrained(tmp_path / "m")
        assert torch.equal(again(inputs), smashed(inputs))


@pytest.mark.slow
@pytest.mark.parametrize("forced", [False, True], ids=["probe", "forced_safe"])
def test_minilm_keeps_cosine_099_with_every_layer_int8(monkeypatch, forced):
    monkeypatch.setenv(FORCE_ENV, "1" if forced else "0")
    loaded = zoo.load("minilm")
    cfg = SmashConfig(["int8_smooth"], device="cpu")
    cfg.add_tokenizer(loaded.tokenizer)
    smashed = smash(loaded.model, cfg, verbose=False)
    state = smashed.applied[0]["state"]
    assert state["calibration"] == "PyDocText calibration text" and state["fp32_layers"] == []
    assert state["int8_path"] == choose_path()
    fid = fidelity(loaded.model, smashed, loaded.example_inputs)
    assert fid.cosine_mean > 0.99 and fid.cosine_min > 0.985
    if state["int8_path"] == SATURATION_SAFE:  # what an AVX2-only CPU computes: the same, bit for bit
        emulated = emulate_avx2(smashed.model)
        with torch.no_grad():
            assert torch.equal(emulated(**loaded.example_inputs), smashed.model(**loaded.example_inputs))
