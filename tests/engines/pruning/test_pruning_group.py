"""Group-aware filter pruning: coupled layers drop the same channels, chosen by summed importance."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit import zoo
from slimkit.engines.pruning import (
    ChannelCoupling,
    GroupFilterPruner,
    GroupL1FilterPruner,
    GroupL2FilterPruner,
    L1FilterPruner,
    PruningConfigError,
)
from slimkit.engines.speedup import ModelSpeedup


def kept_rows(mask: torch.Tensor) -> list[int]:
    return torch.nonzero(mask.reshape(mask.shape[0], -1).sum(1) != 0).flatten().tolist()


@pytest.fixture
def resnet():
    return zoo.load("resnet_tiny", batch_size=2, image_size=16)


def test_residual_group_shares_channels_chosen_by_summed_l1(resnet):
    model, x = resnet
    stem, block = model.conv1.weight.detach().clone(), model.layer1[0].conv2.weight.detach().clone()
    pruner = GroupL1FilterPruner(model, [{"sparsity": 0.5, "op_types": ["Conv2d"]}], dummy_input=x[:1])
    pruner.compress()
    masks = pruner.get_masks()
    score = stem.abs().sum((1, 2, 3)) + block.abs().sum((1, 2, 3))
    expected = sorted(torch.argsort(score, stable=True)[8:].tolist())
    assert kept_rows(masks["conv1"]["weight_mask"]) == expected == kept_rows(masks["layer1.0.conv2"]["weight_mask"])
    stage2 = [kept_rows(masks[n]["weight_mask"]) for n in ("layer2.0.conv2", "layer2.0.downsample.0")]
    assert stage2[0] == stage2[1] and len(stage2[0]) == 16
    groups = {tuple(g.layers): (g.channels, g.pruned) for g in pruner.groups}
    assert groups[("conv1", "layer1.0.conv2")] == (16, 8)
    assert groups[("layer2.0.conv2", "layer2.0.downsample.0")] == (32, 16)
    assert groups[("layer1.0.conv1",)] == (16, 8)


def test_excluded_member_and_model_output_lock_their_channels(resnet):
    model, x = resnet
    pruner = GroupL2FilterPruner(model, [{"sparsity": 0.5, "op_types": ["Conv2d", "Linear"]},
                                         {"exclude": True, "op_names": ["layer2.0.downsample.0"]}], dummy_input=x[:1])
    pruner.compress()
    masks = pruner.get_masks()
    assert kept_rows(masks["layer2.0.conv2"]["weight_mask"]) == list(range(32))  # the excluded conv keeps them
    assert kept_rows(masks["fc"]["weight_mask"]) == list(range(10))  # the model output is never masked
    assert len(kept_rows(masks["layer2.0.conv1"]["weight_mask"])) == 16
    plan = {tuple(g.layers): g for g in pruner.groups}
    assert plan[("layer2.0.conv2",)].prunable == 0 and plan[("fc",)].pruned == 0


class InvertedResidual(nn.Module):
    """expand 1x1 -> depthwise 3x3 -> project 1x1, with a skip: expand and depthwise are one group."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.expand = nn.Conv2d(8, 24, 1)
        self.dw = nn.Conv2d(24, 24, 3, padding=1, groups=24)
        self.project = nn.Conv2d(24, 8, 1)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        s = self.stem(x)
        y = self.project(torch.relu(self.dw(torch.relu(self.expand(s)))))
        return self.head((s + y).mean((2, 3)))


def test_depthwise_chain_and_speedup_remove_exactly_the_masked_channels():
    torch.manual_seed(0)
    model, x = InvertedResidual().eval(), torch.randn(2, 3, 8, 8)
    pruner = GroupL1FilterPruner(model, [{"sparsity": 0.5, "op_types": ["Conv2d"]}], dummy_input=x[:1])
    pruner.compress()
    masks = pruner.get_masks()
    expand, dw = kept_rows(masks["expand"]["weight_mask"]), kept_rows(masks["dw"]["weight_mask"])
    assert expand == dw and len(expand) == 12
    assert kept_rows(masks["stem"]["weight_mask"]) == kept_rows(masks["project"]["weight_mask"])
    with torch.no_grad():
        masked = model(x)
    plain = pruner.unwrap_model(apply_masks=True)
    speedup = ModelSpeedup(plain, x[:1], masks)
    with torch.no_grad():
        small = speedup.speedup_model()
        torch.testing.assert_close(small(x), masked, atol=1e-5, rtol=1e-5)
    assert speedup.warnings == []
    assert (small.stem.out_channels, small.expand.out_channels, small.dw.groups) == (4, 12, 12)


def test_errors_and_names(resnet):
    model, x = resnet
    with pytest.raises(PruningConfigError, match=r"GroupL1FilterPruner needs dummy_input"):
        GroupL1FilterPruner(model, [{"sparsity": 0.5}])
    with pytest.raises(PruningConfigError, match=r"importance must be one of l1, l2, fpgm, got 'l3'"):
        GroupFilterPruner(model, [{"sparsity": 0.5}], dummy_input=x[:1], importance="l3")


@pytest.mark.parametrize("importance", ["l1", "l2", "fpgm"])
def test_every_importance_keeps_groups_consistent(resnet, importance):
    model, x = resnet
    pruner = GroupFilterPruner(model, [{"sparsity": 0.25, "op_types": ["Conv2d"]}], dummy_input=x[:1],
                               importance=importance)
    pruner.compress()
    masks = pruner.get_masks()
    assert kept_rows(masks["conv1"]["weight_mask"]) == kept_rows(masks["layer1.0.conv2"]["weight_mask"])
    assert len(kept_rows(masks["conv1"]["weight_mask"])) == 12


def test_layer_that_never_runs_is_left_unpruned_with_a_warning():
    class Unused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3)
            self.spare = nn.Conv2d(1, 4, 3)

        def forward(self, x):
            return self.conv(x).mean((2, 3))

    torch.manual_seed(0)
    model = Unused()
    x = torch.randn(1, 1, 5, 5)
    pruner = GroupL1FilterPruner(model, [{"sparsity": 0.5, "op_types": ["Conv2d"]}], dummy_input=x)
    with pytest.warns(UserWarning, match=r"\['spare'\] did not run on dummy_input"):
        pruner.compress()
    assert pruner.skipped == ["spare"]
    assert kept_rows(pruner.get_masks()["spare"]["weight_mask"]) == [0, 1, 2, 3]


class ConcatDepthwise(nn.Module):
    """Two convs concatenated, then one depthwise conv over both: the depthwise joins the two channel groups."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.dw(torch.cat([self.a(x), self.b(x)], 1)).mean((2, 3)))


def test_revising_per_layer_masks_decides_groups_joined_by_a_depthwise_conv_together():
    torch.manual_seed(0)
    model, x = ConcatDepthwise().eval(), torch.randn(1, 3, 6, 6)
    coupling = ChannelCoupling(model, x)
    pruner = L1FilterPruner(model, [{"sparsity": 0.5, "op_names": ["a", "b", "dw"]}])
    pruner.compress()
    plans = coupling.reconcile(pruner, lock=False, balance=True, min_layers=2)
    assert [(sorted(p.layers), p.channels, p.pruned) for p in plans] == [(["a", "b", "dw"], 8, 4)]
    masks = pruner.get_masks()
    a, b, dw = (kept_rows(masks[n]["weight_mask"]) for n in ("a", "b", "dw"))
    assert dw == a + [4 + r for r in b] and len(dw) == 4
    speedup = ModelSpeedup(pruner.unwrap_model(apply_masks=True), x, masks)
    speedup.speedup_model()
    assert speedup.warnings == [] and model.dw.groups == 4
