"""Channel units cut where MMRazor cuts them: each input of a concat that one layer reads whole (a channel
attention's gate) is its own unit; the shared layer is pruned for each unit's rows and DCFF fuses it once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.pruning.dcff import FilterFusion

X = torch.rand(2, 3, 6, 6)
class GatedConcat(nn.Module):
    """a (3->4) and b (3->6) concatenated, gated by a channel attention fc (10->10) read by c (10->5)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 6, 3, padding=1)
        self.fc, self.c = nn.Conv2d(10, 10, 1), nn.Conv2d(10, 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.cat((F.relu(self.a(x)), F.relu(self.b(x))), dim=1)
        h = h * torch.sigmoid(self.fc(F.adaptive_avg_pool2d(h, 1)))
        return self.c(h).mean(dim=(2, 3))


def test_each_input_of_a_gated_concat_is_its_own_unit_and_the_gate_is_cut_in_both():
    model = GatedConcat()
    units = ChannelUnits(model, X)
    by_name = units.by_name()
    assert list(by_name) == ["a_(0, 4)_4", "b_(0, 6)_6"]  # MMRazor's cut; the fc alone does not join them
    a, b = by_name["a_(0, 4)_4"], by_name["b_(0, 6)_6"]
    assert a.producers["fc"].tolist() == [0, 1, 2, 3, -1, -1, -1, -1, -1, -1]
    assert b.producers["fc"].tolist() == [-1, -1, -1, -1, 0, 1, 2, 3, 4, 5]
    assert a.readers["c"][0].tolist() == [0, 1, 2, 3] and b.readers["c"][0].tolist() == [4, 5, 6, 7, 8, 9]
    units.attach()
    a.keep([1, 3])
    b.keep([0, 2, 5])
    with torch.no_grad():
        masked = model(X)
    units.deploy()
    assert (model.a.out_channels, model.b.out_channels, model.fc.in_channels, model.fc.out_channels,
            model.c.in_channels) == (2, 3, 5, 5, 5)
    with torch.no_grad():
        torch.testing.assert_close(model(X), masked, atol=1e-5, rtol=1e-5)


def test_dcff_fuses_a_layer_shared_by_two_units_once_and_each_unit_sets_its_own_rows():
    model = GatedConcat()
    units = ChannelUnits(model, X)
    fusion = FilterFusion(units)
    assert sorted(fusion.fused) == ["a", "b", "fc"]  # c makes the output: not a unit
    a, b = units.by_name()["a_(0, 4)_4"], units.by_name()["b_(0, 6)_6"]
    fusion.fuse(a, 2, tau=1.0)
    fusion.fuse(b, 3, tau=1.0)
    mix = model.fc.parametrizations["weight"][0].mix
    dropped_rows = [r for r in range(4) if a.mask[r] == 0] + [4 + r for r in range(6) if b.mask[r] == 0]
    assert len(dropped_rows) == 5 and all(float(mix[r].abs().sum()) == 0 for r in dropped_rows)
    kept_rows = sorted(set(range(10)) - set(dropped_rows))
    assert all(float(mix[r].sum()) == pytest.approx(1.0) for r in kept_rows)  # softmax rows: fused, not zeroed
