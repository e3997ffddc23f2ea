"""Attention-head pruning on tiny Llama (GQA) and BERT models."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from slimkit.engines.pruning import AttentionHeadPruner, PruningConfigError, find_head_layout


def _rows_zero(mask: torch.Tensor, unit: int) -> list[int]:
    return [i for i in range(mask.shape[0] // unit) if not mask[i * unit : (i + 1) * unit].any()]


def _cols_zero(mask: torch.Tensor, unit: int) -> list[int]:
    return _rows_zero(mask.t(), unit)


def test_layout_detection(tiny_llama, tiny_bert):
    layout = find_head_layout(tiny_llama.model.layers[0].self_attn)
    assert (layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.group_size) == (4, 2, 16, 2)
    bert = find_head_layout(tiny_bert.encoder.layer[0].attention)
    assert (bert.q, bert.o, bert.num_heads, bert.num_kv_heads, bert.head_dim) == ("self.query", "output.dense", 4, 4, 8)
    assert find_head_layout(tiny_bert.encoder.layer[0].attention.self) is None
    assert find_head_layout(nn.Linear(3, 3)) is None


def test_llama_gqa_prunes_whole_kv_groups(tiny_llama):
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    reference = copy.deepcopy(tiny_llama)
    with torch.no_grad():  # make group 0 of layer 0 clearly more important -> group 1 goes
        for proj in ("q_proj", "k_proj", "v_proj"):
            getattr(tiny_llama.model.layers[0].self_attn, proj).weight[:32 if proj == "q_proj" else 16] *= 10
        tiny_llama.model.layers[0].self_attn.o_proj.weight[:, :32] *= 10
    reference.load_state_dict(tiny_llama.state_dict())
    pruner = AttentionHeadPruner(tiny_llama, [{"sparsity": 0.5}])
    pruner.compress()
    assert pruner.get_pruned_kv_heads()["model.layers.0.self_attn"] == [1]
    assert pruner.get_pruned_heads()["model.layers.0.self_attn"] == [2, 3]
    masks = pruner.get_masks()
    assert len(masks) == 8
    for block, kv in pruner.get_pruned_kv_heads().items():
        assert len(kv) == 1
        q_heads = pruner.get_pruned_heads()[block]
        assert q_heads == [2 * kv[0], 2 * kv[0] + 1]  # the query heads that share the pruned kv head
        assert _rows_zero(masks[f"{block}.q_proj"]["weight_mask"], 16) == q_heads
        assert _rows_zero(masks[f"{block}.k_proj"]["weight_mask"], 16) == kv
        assert _rows_zero(masks[f"{block}.v_proj"]["weight_mask"], 16) == kv
        assert _cols_zero(masks[f"{block}.o_proj"]["weight_mask"], 16) == q_heads
        assert masks[f"{block}.o_proj"]["weight_mask"].sum() == 64 * 32
    # the wrapped model computes exactly what the model with zeroed weights computes
    plain = reference
    with torch.no_grad():
        for name, m in masks.items():
            plain.get_submodule(name).weight.mul_(m["weight_mask"])
        assert torch.allclose(tiny_llama(ids).logits, plain(ids).logits, atol=1e-5)
    unwrapped = pruner.unwrap_model()
    for name, m in masks.items():
        assert unwrapped.get_submodule(name).weight.shape == m["weight_mask"].shape


@pytest.mark.parametrize(("sparsity", "groups"), [(0.25, 0), (0.5, 1), (0.75, 1), (0.99, 1)])
def test_llama_group_counts(tiny_llama, sparsity, groups):
    pruner = AttentionHeadPruner(tiny_llama, [{"sparsity": sparsity}])
    pruner.compress()
    assert [len(v) for v in pruner.get_pruned_kv_heads().values()] == [groups, groups]
    assert [len(v) for v in pruner.get_pruned_heads().values()] == [2 * groups, 2 * groups]


def test_bert_heads_l1_and_l2(tiny_bert):
    with torch.no_grad():
        tiny_bert.encoder.layer[0].attention.self.value.weight[8:16] *= 0.01  # head 1 is the weakest
    for importance in ("l1", "l2"):
        pruner = AttentionHeadPruner(tiny_bert, [{"sparsity": 0.5}], importance=importance)
        pruner.compress()
        heads = pruner.get_pruned_heads()
        assert [len(v) for v in heads.values()] == [2, 2]
        assert 1 in heads["encoder.layer.0.attention"]
        masks = pruner.get_masks()
        block = "encoder.layer.0.attention"
        assert _rows_zero(masks[f"{block}.self.key"]["weight_mask"], 8) == heads[block]
        assert _rows_zero(masks[f"{block}.self.value"]["bias_mask"].unsqueeze(1), 8) == heads[block]
        assert torch.all(masks[f"{block}.output.dense"]["bias_mask"] == 1)
        out = tiny_bert(torch.randint(0, 100, (1, 6))).last_hidden_state
        assert out.shape == (1, 6, 32) and torch.isfinite(out).all()
        pruner.unwrap_model()


def test_select_one_block_by_name(tiny_llama):
    pruner = AttentionHeadPruner(tiny_llama, [{"sparsity": 0.5, "op_names": ["model.layers.1.self_attn"]}])
    pruner.compress()
    assert list(pruner.get_pruned_heads()) == ["model.layers.1.self_attn"]
    projections = ("k_proj", "o_proj", "q_proj", "v_proj")
    assert sorted(pruner.get_masks()) == [f"model.layers.1.self_attn.{p}" for p in projections]


def test_attention_errors(tiny_llama, mlp):
    with pytest.raises(PruningConfigError, match="found no attention block in this model"):
        AttentionHeadPruner(mlp, [{"sparsity": 0.5}])
    with pytest.raises(PruningConfigError, match="is a Linear, which this pruner cannot prune; it supports Llama"):
        AttentionHeadPruner(tiny_llama, [{"sparsity": 0.5, "op_types": ["Linear"]}])
    with pytest.raises(PruningConfigError, match="importance must be 'l1' or 'l2', got 'l3'"):
        AttentionHeadPruner(tiny_llama, [{"sparsity": 0.5}], importance="l3")
