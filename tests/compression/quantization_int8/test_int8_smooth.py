from __future__ import annotations

import pytest
import torch

from slimkit import SmashConfig, smash, zoo
from slimkit.data import make_datamodule
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


@pytest.mark.slow
def test_minilm_keeps_cosine_099_with_every_layer_int8():
    loaded = zoo.load("minilm")
    cfg = SmashConfig(["int8_smooth"], device="cpu")
    cfg.add_tokenizer(loaded.tokenizer)
    smashed = smash(loaded.model, cfg, verbose=False)
    state = smashed.applied[0]["state"]
    assert state["calibration"] == "PyDocText calibration text" and state["fp32_layers"] == []
    fid = fidelity(loaded.model, smashed, loaded.example_inputs)
    assert fid.cosine_mean > 0.99 and fid.cosine_min > 0.985
