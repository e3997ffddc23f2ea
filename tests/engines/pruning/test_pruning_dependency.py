"""NNI's ``dependency_aware=True, dummy_input=...`` on every filter pruner: coupled layers share one mask."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit import zoo
from slimkit.engines.pruning import (
    ActivationAPoZRankFilterPruner,
    ActivationMeanRankFilterPruner,
    FPGMEngine,
    GroupFilterPruner,
    GroupL1FilterPruner,
    GroupL2FilterPruner,
    L1FilterPruner,
    L2FilterPruner,
    PruningConfigError,
    TaylorFOWeightFilterPruner,
)
from slimkit.engines.speedup import ModelSpeedup

CONV = [{"sparsity": 0.5, "op_types": ["Conv2d"]}]


def kept_rows(mask: torch.Tensor) -> list[int]:
    return torch.nonzero(mask.reshape(mask.shape[0], -1).sum(1) != 0).flatten().tolist()


@pytest.fixture
def resnet():
    return zoo.load("resnet_tiny", batch_size=4, image_size=16)


def _build(cls, model, x, dependency_aware):
    flag = {"dependency_aware": True, "dummy_input": x[:1]} if dependency_aware else {}
    if cls is TaylorFOWeightFilterPruner:
        y = torch.arange(len(x)) % 10
        return cls(model, CONV, criterion=nn.functional.cross_entropy, dataloader=[(x, y)], **flag)
    if cls in (ActivationAPoZRankFilterPruner, ActivationMeanRankFilterPruner):
        return cls(model, CONV, dataloader=[x], **flag)
    return cls(model, CONV, **flag)


PRUNERS = [L1FilterPruner, L2FilterPruner, FPGMEngine, ActivationAPoZRankFilterPruner,
           ActivationMeanRankFilterPruner, TaylorFOWeightFilterPruner]


@pytest.mark.parametrize("cls", PRUNERS, ids=lambda c: c.__name__)
def test_every_filter_pruner_gives_coupled_layers_one_mask_the_speedup_removes(resnet, cls):
    model, x = resnet
    pruner = _build(cls, model, x, dependency_aware=True)
    pruner.compress()
    masks = pruner.get_masks()
    residual = [kept_rows(masks[n]["weight_mask"]) for n in ("conv1", "layer1.0.conv2")]
    assert residual[0] == residual[1] and len(residual[0]) == 8
    assert {tuple(g.layers): g.pruned for g in pruner.groups}[("conv1", "layer1.0.conv2")] == 8
    with torch.no_grad():
        masked = model(x)
    speedup = ModelSpeedup(pruner.unwrap_model(apply_masks=True), x[:1], masks)
    small = speedup.speedup_model()
    assert speedup.warnings == []
    assert (small.conv1.out_channels, small.layer1[0].conv1.out_channels) == (8, 8)
    with torch.no_grad():
        torch.testing.assert_close(small(x), masked, atol=1e-4, rtol=1e-4)


def test_without_the_flag_residual_members_choose_apart(resnet):
    model, x = resnet
    pruner = L1FilterPruner(model, CONV)
    pruner.compress()
    masks = pruner.get_masks()
    assert kept_rows(masks["conv1"]["weight_mask"]) != kept_rows(masks["layer1.0.conv2"]["weight_mask"])
    assert pruner.coupling is None and pruner.groups == []


class GatedMLP(nn.Module):
    """LLaMA-style gated MLP on a concat of two branches: gate/up are tied by the product, a/b by the concat."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 4), nn.Linear(6, 4)
        self.gate, self.up, self.down = nn.Linear(8, 16), nn.Linear(8, 16), nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.a(x), self.b(x)], -1)
        return self.down(nn.functional.silu(self.gate(h)) * self.up(h))


def test_gated_mlp_gate_and_up_share_channels():
    torch.manual_seed(0)
    model, x = GatedMLP().eval(), torch.randn(5, 6)
    pruner = L2FilterPruner(model, [{"sparsity": 0.5, "op_types": ["Linear"]}], dependency_aware=True,
                            dummy_input=x[:1])
    pruner.compress()
    masks = pruner.get_masks()
    assert kept_rows(masks["gate"]["weight_mask"]) == kept_rows(masks["up"]["weight_mask"])
    assert len(kept_rows(masks["gate"]["weight_mask"])) == 8
    assert kept_rows(masks["down"]["weight_mask"]) == [0, 1, 2]  # the model output is never masked
    with torch.no_grad():
        masked = model(x)
    speedup = ModelSpeedup(pruner.unwrap_model(apply_masks=True), x[:1], masks)
    small = speedup.speedup_model()
    assert (small.gate.out_features, small.up.out_features, small.down.in_features) == (8, 8, 8)
    assert small.a.out_features + small.b.out_features == small.gate.in_features == 4
    with torch.no_grad():
        torch.testing.assert_close(small(x), masked, atol=1e-5, rtol=1e-5)


def test_missing_dummy_input_and_bad_flag_say_what_to_pass(resnet):
    model, x = resnet
    for cls in (L1FilterPruner, ActivationAPoZRankFilterPruner):
        with pytest.raises(PruningConfigError) as info:
            cls(model, CONV, dependency_aware=True)
        message = str(info.value)
        assert f"{cls.__name__} needs dummy_input (an input the model accepts) when dependency_aware=True" in message
        assert "dummy_input=torch.randn(1, C, H, W)" in message and "dependency_aware=False" in message
    with pytest.raises(PruningConfigError, match=r"dependency_aware must be True or False, got Tensor"):
        L1FilterPruner(model, CONV, None, x[:1])  # dummy_input passed where NNI puts dependency_aware


def test_group_pruners_are_the_flagged_filter_pruners(resnet):
    model, x = resnet
    assert issubclass(GroupL1FilterPruner, L1FilterPruner) and issubclass(GroupL2FilterPruner, L2FilterPruner)
    results = []
    for cls, kwargs in ((GroupL1FilterPruner, {}), (GroupFilterPruner, {"importance": "l1"}),
                        (L1FilterPruner, {"dependency_aware": True})):
        pruner = cls(model, CONV, dummy_input=x[:1], **kwargs)
        pruner.compress()
        results.append(pruner.get_masks())
        pruner.unwrap_model()
    for masks in results[1:]:
        assert all(torch.equal(masks[n]["weight_mask"], results[0][n]["weight_mask"]) for n in masks)


def test_llama_attention_prunes_whole_kv_groups_and_gated_mlp_channels(tiny_llama):
    ids = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(0))
    pruner = L1FilterPruner(tiny_llama, [{"sparsity": 0.5, "op_types": ["Linear"]}], dependency_aware=True,
                            dummy_input={"input_ids": ids}, dims=["mlp", "heads"])  # hidden: norms see fewer
    pruner.compress()
    assert pruner.skipped == []
    plans = {tuple(g.layers): (g.channels, g.pruned) for g in pruner.groups}
    attn = "model.layers.0.self_attn."
    assert plans[tuple(attn + p for p in ("q_proj", "k_proj", "v_proj", "o_proj"))] == (2, 1)  # 2 kv groups
    assert plans[("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj")] == (128, 64)
    masks = pruner.get_masks()
    q, k = (kept_rows(masks[attn + p]["weight_mask"]) for p in ("q_proj", "k_proj"))
    assert len(q) == 32 and len(k) == 16 and q[0] // 32 == k[0] // 16  # the same kv group (2 q heads of 16)
    with torch.no_grad():
        masked = tiny_llama(input_ids=ids).logits
    speedup = ModelSpeedup(pruner.unwrap_model(apply_masks=True), {"input_ids": ids}, masks)
    small = speedup.speedup_model()
    assert speedup.warnings == []
    layer = small.model.layers[0]
    assert (layer.self_attn.q_proj.out_features, layer.self_attn.o_proj.in_features) == (32, 32)
    assert layer.mlp.gate_proj.out_features == layer.mlp.down_proj.in_features == 64
    with torch.no_grad():
        torch.testing.assert_close(small(input_ids=ids).logits, masked, atol=1e-5, rtol=1e-5)
