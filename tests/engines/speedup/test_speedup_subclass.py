"""Subclasses of Conv/Linear: selected by ``op_types`` of their base, shrunk in place, or refused clearly."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from slimkit.engines.pruning import L1FilterPruner
from slimkit.engines.speedup import ModelSpeedup, SpeedupError, apply_kept_channels
from tests.engines.speedup.efficientnet_models import Conv2dSame


class SameNet(nn.Module):
    """Strided TF-"SAME" convs, a depthwise one among them, on an odd input size (asymmetric padding)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = Conv2dSame(3, 8, 3, stride=2)
        self.dw = Conv2dSame(8, 8, 3, groups=8)
        self.b = Conv2dSame(8, 6, 3, stride=2)
        self.fc = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.b(torch.relu(self.dw(torch.relu(self.a(x))))).mean((2, 3)))


class ScaledConv(nn.Conv2d):
    """A Conv2d subclass with a per-channel gain of its own: the speedup cannot know how to shrink it."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.gain = nn.Parameter(torch.linspace(0.5, 1.5, self.out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.gain.view(1, -1, 1, 1)


class ScaledNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3)
        self.s = ScaledConv(8, 6, 3)
        self.fc = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.s(torch.relu(self.a(x))).mean((2, 3)))


def test_conv2d_op_type_selects_the_subclass_and_speedup_keeps_its_forward():
    torch.manual_seed(0)
    model, x = SameNet().eval(), torch.randn(2, 3, 9, 9)
    pruner = L1FilterPruner(model, [{"sparsity": 0.5, "op_types": ["Conv2d"]}], dependency_aware=True,
                            dummy_input=x[:1])
    assert [w.name for w in pruner.get_modules_wrapper()] == ["a", "dw", "b"]
    assert pruner.get_modules_wrapper()[0].config["op_type"] == "Conv2dSame"
    pruner.compress()
    with torch.no_grad():
        masked = model(x)
    masks = pruner.get_masks()
    plain = pruner.unwrap_model(apply_masks=True)
    fresh = copy.deepcopy(plain)
    speedup = ModelSpeedup(plain, x[:1], masks)
    small = speedup.speedup_model()
    assert speedup.warnings == []
    assert [type(m) for m in (small.a, small.dw, small.b)] == [Conv2dSame] * 3
    assert (small.a.out_channels, small.dw.groups, small.b.out_channels, small.fc.in_features) == (4, 4, 3, 3)
    with torch.no_grad():
        torch.testing.assert_close(small(x), masked, atol=1e-5, rtol=1e-5)
        replayed = apply_kept_channels(fresh, speedup.kept_channels)
        assert type(replayed.dw) is Conv2dSame and replayed.dw.groups == 4


def test_subclass_with_its_own_state_is_refused_naming_the_exclude_entry():
    torch.manual_seed(0)
    model, x = ScaledNet().eval(), torch.randn(1, 3, 8, 8)
    pruner = L1FilterPruner(model, [{"sparsity": 0.5, "op_types": ["Conv2d"]}])
    pruner.compress()
    masks = pruner.get_masks()
    plain = pruner.unwrap_model(apply_masks=True)
    with pytest.raises(SpeedupError) as info:
        ModelSpeedup(plain, x, masks).speedup_model()
    message = str(info.value)
    assert "Layer 's' is a ScaledConv, a subclass of nn.Conv2d with its own parameter 'gain'" in message
    assert "{'exclude': True, 'op_names': ['s', 'a']}" in message
    assert (plain.a.out_channels, plain.s.in_channels, plain.s.gain.numel()) == (8, 8, 6)  # left unchanged
    # the entry the message names avoids the problem: nothing next to the subclass is pruned
    model = ScaledNet().eval()
    pruner = L1FilterPruner(model, [{"sparsity": 0.5, "op_types": ["Conv2d"]},
                                    {"exclude": True, "op_names": ["s", "a"]}])
    assert pruner.get_modules_wrapper() == []


def test_replaying_a_record_onto_a_refused_subclass_fails_before_changing_anything():
    model = ScaledNet()
    with pytest.raises(SpeedupError, match=r"'exclude': True, 'op_names': \['s'\]"):
        apply_kept_channels(model, {"s": {"out": [0, 1, 2], "in": list(range(8))}})
    assert model.s.out_channels == 6 and model.s.weight.shape[0] == 6
