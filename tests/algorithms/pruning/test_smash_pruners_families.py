"""Default l1_filter (mlp + heads + hidden) on transformers' own families: Torch-Pruning's cut, exact reloads."""

from __future__ import annotations

import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash
from slimkit.evaluation import count_parameters
from tests.algorithms.pruning.families import build, main_output


def _smash(name: str, **hps):
    model, inputs = build(name)
    cfg = SmashConfig({"l1_filter": {"sparsity": 0.5, **hps}}, device="cpu")
    cfg.add_example_inputs(inputs)
    return model, inputs, smash(model, cfg, verbose=False)


@pytest.mark.parametrize(("name", "most"), [
    ("bert", 0.40), ("roberta", 0.40), ("distilbert", 0.40), ("deberta_v2", 0.40), ("electra", 0.40),
    ("vit", 0.40), ("deit", 0.40), ("regnet", 0.35), ("mobilevit", 0.35),
])
def test_half_keeps_what_torch_pruning_keeps(name, most):
    model, inputs, smashed = _smash(name)
    kept = count_parameters(smashed.model) / count_parameters(model)
    assert kept <= most, kept
    with torch.no_grad():
        out, base = main_output(smashed(**inputs)), main_output(model(**inputs))
    assert out.shape == base.shape and torch.isfinite(out).all()
    state = smashed.applied[0]["state"]
    if name not in ("regnet", "mobilevit"):  # transformers: the residual stream and the heads went too
        assert state["config_sizes"]["hidden_size"] == 32 and state["config_sizes"]["num_attention_heads"] == 2
        assert smashed.model.config.hidden_size == 32 and model.config.hidden_size == 64


@pytest.mark.parametrize("name", ["phi3", "gpt2", "mixtral", "convnext", "swin"])
def test_prune_save_and_reload_exactly(name, tmp_path):
    model, inputs, smashed = _smash(name)
    assert count_parameters(smashed.model) < 0.4 * count_parameters(model)
    smashed.save_pretrained(tmp_path / "slimkit")
    again = SmashedModel.from_pretrained(tmp_path / "slimkit")
    with torch.no_grad():
        out = main_output(smashed(**inputs))
        assert torch.equal(main_output(again(**inputs)), out)
    if name in ("convnext", "swin"):  # per-stage sizes: a list the config cannot hold per block
        return
    smashed.model.save_pretrained(tmp_path / "hf")  # transformers alone rebuilds it from the new config
    plain = type(model).from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        torch.testing.assert_close(main_output(plain(**inputs)), out, atol=0, rtol=0)


def test_phi3_fused_projections_are_cut_part_by_part():
    model, inputs, smashed = _smash("phi3")
    for layer in smashed.model.model.layers:
        att, mlp = layer.self_attn, layer.mlp
        assert att.qkv_proj.weight.shape == ((2 + 2 * 1) * 16, 32)  # 2 query heads + 1 kv head of 16, hidden 32
        assert mlp.gate_up_proj.weight.shape == (2 * 64, 32) and mlp.down_proj.weight.shape == (32, 64)
    kept = smashed.applied[0]["state"]["kept_channels"]["model.layers.0.mlp.gate_up_proj"]["out"]
    gate, up = kept[:64], kept[64:]
    assert [g + 128 for g in gate] == up  # gate channel i and up channel i go together
    generated = smashed.model.generate(**inputs, max_new_tokens=2, do_sample=False)  # fewer kv heads in the cache
    assert generated.shape == (2, 10)


def test_gpt2_conv1d_layers_shrink_as_transposed_linears():
    model, inputs, smashed = _smash("gpt2")
    block = smashed.model.transformer.h[0]
    assert block.attn.c_attn.weight.shape == (32, 3 * 32) and block.attn.c_attn.nf == 96
    assert block.mlp.c_fc.weight.shape == (32, 128) and block.mlp.c_proj.weight.shape == (128, 32)
    assert smashed.model.lm_head.weight is smashed.model.transformer.wte.weight  # still tied
    assert smashed.model.config.n_embd == 32 and smashed.model.config.n_head == 2


def test_convnext_layer_scale_shrinks_with_its_channels():
    model, inputs, smashed = _smash("convnext")
    layer = smashed.model.convnext.encoder.stages[0].layers[0]
    assert layer.layer_scale_parameter.shape == (layer.dwconv.out_channels,) == (8,)
    kept = smashed.applied[0]["state"]["kept_channels"]
    scale = "convnext.encoder.stages[0].layers[0]".replace("[", ".").replace("]", "") + ".layer_scale_parameter"
    assert kept[scale]["keep"] == kept["convnext.encoder.stages.0.layers.0.dwconv"]["out"]


def test_mixtral_experts_keep_their_own_channels_and_the_router_its_experts():
    model, inputs, smashed = _smash("mixtral")
    moe = smashed.model.model.layers[0].mlp
    assert moe.experts.gate_up_proj.shape == (4, 2 * 64, 32) and moe.experts.down_proj.shape == (4, 32, 64)
    assert moe.gate.weight.shape == (4, 32) and moe.gate.hidden_dim == 32  # hidden columns only
    inner = smashed.applied[0]["state"]["kept_channels"]["model.layers.0.mlp.experts"]["inner"]
    base = model.model.layers[0].mlp.experts
    for e, channels in enumerate(inner):  # each expert keeps its own strongest half (L1 of gate, up, down)
        score = base.gate_up_proj[e].abs().reshape(2, 128, -1).sum((0, 2)) + base.down_proj[e].abs().sum(0)
        assert channels == sorted(score.argsort()[64:].tolist())
    assert len({tuple(c) for c in inner}) > 1


def test_per_dimension_ratios():
    model, inputs, smashed = _smash("phi3", dims={"mlp": 0.75, "heads": None, "hidden": 0.25})
    layer = smashed.model.model.layers[0]
    assert layer.mlp.down_proj.weight.shape == (48, 32)  # hidden 64 -> 48, MLP 128 -> 32
    assert layer.self_attn.o_proj.weight.shape == (48, 32)  # 2 of 4 query heads (1 of 2 kv heads)


def test_nothing_left_says_which_op_pins_what_and_how_to_get_around_it():
    from slimkit.errors import ConfigError

    model, inputs = build("gpt2")
    cfg = SmashConfig({"l1_filter": {"dims": ["mlp"], "exclude": ["transformer.h.0.mlp.c_fc",
                                                                  "transformer.h.1.mlp.c_fc"]}}, device="cpu")
    cfg.add_example_inputs(inputs)
    with pytest.raises(ConfigError) as info:
        smash(model, cfg, verbose=False)
    text = str(info.value)
    assert ("['transformer.h.0.attn.c_proj', 'transformer.h.0.mlp.c_proj', 'transformer.h.1.attn.c_proj', ...] (4 "
            "layers): its channels are the residual stream fed by 'transformer.wte' (dimension 'hidden') — add "
            "'hidden' to cfg['l1_filter_dims']") in text
    assert ("['transformer.h.0.attn.c_attn', 'transformer.h.1.attn.c_attn']: it is the q/k/v projection of an "
            "attention block, pruned only by whole heads — add 'heads' to cfg['l1_filter_dims']") in text
    assert "['lm_head']: its channels reach the model output, whose shape is kept.\n" in text
