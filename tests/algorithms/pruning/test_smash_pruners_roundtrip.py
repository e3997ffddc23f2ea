"""Sparsity 0 changes nothing; pruned zoo and Hugging Face models save and load without model=."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.evaluation import count_parameters
from slimkit.utils import main_tensor, run_model


def _out(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return main_tensor(run_model(model, inputs))


def _smash(model, inputs, algo: str, **hps) -> SmashedModel:
    cfg = SmashConfig({algo: hps}, device="cpu")
    cfg.add_example_inputs(inputs)
    return smash(model, cfg, verbose=False)


@pytest.mark.parametrize(("name", "algo", "hps"), [
    ("digits_cnn", "l1_filter", {}),
    ("resnet_tiny", "fpgm", {}),
    ("digits_cnn", "slim", {}),
    ("tiny_llama", "l2_filter", {"heads": True}),
])
def test_sparsity_zero_is_bit_identical(name, algo, hps):
    model, x = zoo.load(name)
    smashed = _smash(model, x, algo, sparsity=0.0, **hps)
    assert smashed.applied[0]["state"]["kept_channels"] == {}
    assert count_parameters(smashed.model) == count_parameters(model)
    assert torch.equal(_out(smashed, x), _out(model, x))


def test_zoo_bert_with_heads_reloads_without_model(tmp_path):
    model, x = zoo.load("tiny_bert")
    smashed = _smash(model, x, "l1_filter", sparsity=0.5, heads=True)
    assert smashed.model.bert.encoder.layer[1].attention.self.num_attention_heads == 2
    smashed.save_pretrained(tmp_path / "bert")
    saved = json.loads((tmp_path / "bert" / "smash_config.json").read_text())
    assert saved["base"]["kind"] == "zoo"
    again = SmashedModel.from_pretrained(tmp_path / "bert")
    assert count_parameters(again.model) == count_parameters(smashed.model) < count_parameters(model)
    assert torch.equal(_out(again, x), _out(smashed, x))


def test_plain_hugging_face_llama_reloads_from_its_config(tmp_path):
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    ids = {"input_ids": torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(3))}
    smashed = _smash(model, ids, "l2_filter", sparsity=0.5, heads=True)
    mlp, att = smashed.model.model.layers[0].mlp, smashed.model.model.layers[0].self_attn
    assert (mlp.gate_proj.out_features, att.k_proj.out_features, att.o_proj.in_features) == (48, 16, 32)
    smashed.save_pretrained(tmp_path / "llama")
    assert json.loads((tmp_path / "llama" / "smash_config.json").read_text())["base"]["kind"] == "hf"
    again = SmashedModel.from_pretrained(tmp_path / "llama")
    assert torch.equal(_out(again, ids), _out(smashed, ids))
    assert again.generate(**ids, max_new_tokens=2, do_sample=False).shape == (2, 11)


def test_without_speedup_masks_stay_as_zeros_and_reload(tmp_path):
    model, x = zoo.load("digits_cnn")
    smashed = _smash(model, x, "l2_filter", sparsity=0.5, speedup=False)
    state = smashed.applied[0]["state"]
    assert state["kept_channels"] == {} and state["left_dense"] == []  # no speedup: 'default' = every Conv/Linear
    for name in ("features.0", "features.4", "features.8", "classifier.1", "classifier.3"):
        weight = smashed.model.get_submodule(name).weight
        assert weight.shape == model.get_submodule(name).weight.shape
        assert int((weight.flatten(1).abs().sum(1) == 0).sum()) == weight.shape[0] // 2
    smashed.save_pretrained(tmp_path / "masked")
    again = SmashedModel.from_pretrained(tmp_path / "masked")
    assert torch.equal(_out(again, x), _out(smashed, x))


def test_agp_level_prunes_single_weights_while_training():
    model, x = zoo.load("digits_cnn")
    cfg = SmashConfig({"agp": {"sparsity": 0.6, "pruning_algorithm": "level", "epochs": 1, "batch_size": 256}},
                      device="cpu")
    cfg.add_data("Digits")
    smashed = smash(model, cfg, verbose=False)
    for name in ("features.4", "features.8", "classifier.1"):
        weight = smashed.model.get_submodule(name).weight
        assert weight.shape == model.get_submodule(name).weight.shape
        assert int((weight == 0).sum()) == int(0.6 * weight.numel() + 1e-6)
    assert smashed.applied[0]["state"]["train_steps"] == 6 and smashed.applied[0]["state"]["kept_channels"] == {}
