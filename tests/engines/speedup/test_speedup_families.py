"""The speedup on GPT-2's Conv1D, ViT's class token, MoE experts and tied embeddings; config sizes."""

from __future__ import annotations

import torch

from slimkit.engines.speedup import ModelSpeedup, apply_kept_channels, trace_channels
from slimkit.engines.speedup.hf_config import record_sizes
from tests.algorithms.pruning.families import build


def _masked(model, masks):
    with torch.no_grad():
        for name, entry in masks.items():
            module = model.get_submodule(name)
            if "weight_mask" in entry:
                module.weight.mul_(entry["weight_mask"])
                if getattr(module, "bias", None) is not None and entry.get("bias_mask") is not None:
                    module.bias.mul_(entry["bias_mask"])


def test_conv1d_rows_are_its_weight_columns():
    model, inputs = build("gpt2")
    fc = model.transformer.h[0].mlp.c_fc  # Conv1D(nf=256, nx=64): weight [64, 256]
    mask = torch.zeros_like(fc.weight)
    mask[:, ::2] = 1
    masks = {"transformer.h.0.mlp.c_fc": {"weight_mask": mask, "bias_mask": mask[0].clone()}}
    _masked(model, masks)
    with torch.no_grad():
        ref = model(**inputs).logits
    speedup = ModelSpeedup(model, inputs, masks)
    speedup.speedup_model()
    assert fc.weight.shape == (64, 128) and fc.nf == 128
    assert model.transformer.h[0].mlp.c_proj.weight.shape == (128, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, ref, atol=1e-5, rtol=1e-5)


def test_class_token_and_position_table_follow_the_hidden_channels():
    model, inputs = build("vit")
    graph = trace_channels(model, inputs)
    assert {"vit.embeddings.cls_token", "vit.embeddings.position_embeddings"} <= set(graph.params)
    roots = graph.uf.roots()
    cls = graph.params["vit.embeddings.cls_token"]
    patch = graph.spaces["vit.embeddings.patch_embeddings.projection#out"].ids
    assert (roots[cls.ids] == roots[patch]).all()  # concatenated along the tokens: the same channels
    assert not [p for p in graph.pins if p.fatal]


def test_experts_masks_shrink_each_expert_and_replay(tmp_path):
    model, inputs = build("mixtral")
    fresh, _ = build("mixtral")
    name = "model.layers.1.mlp.experts"
    inner = torch.stack([torch.arange(e, 128, 2)[:48] for e in range(4)])  # 48 of 128, different per expert
    speedup = ModelSpeedup(model, inputs, {name: {"inner_channels": inner}})
    speedup.speedup_model()
    experts = model.get_submodule(name)
    assert experts.gate_up_proj.shape == (4, 96, 64) and experts.intermediate_dim == 48
    assert speedup.kept_channels[name]["inner"] == inner.tolist()
    base = fresh.get_submodule(name)
    assert torch.equal(experts.down_proj[2], base.down_proj[2][:, inner[2]])
    apply_kept_channels(fresh, speedup.kept_channels)
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(fresh(**inputs).logits, model(**inputs).logits)


def test_config_sizes_are_left_alone_when_blocks_differ():
    model, inputs = build("bert")
    rows = list(range(64))
    masks = {"bert.encoder.layer.0.intermediate.dense": {"out_channels": torch.tensor(rows)}}
    ModelSpeedup(model, inputs, masks).speedup_model()  # layer 0's MLP only: no one intermediate_size fits
    changed, why = record_sizes(model)
    assert changed == {} and "no single value per config field describes every block" in why
    assert model.config.intermediate_size == 128
