"""The channel-unit engines under MMRazor's pruners: units from the dependency graph, live masks, deploy, and the
GroupFisher / DMCP / iterative-schedule arithmetic."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.pruning.dcff import temperature
from slimkit.engines.pruning.dmcp import DMCPSearch, split_unit
from slimkit.engines.pruning.group_fisher import GroupFisherPruner
from slimkit.engines.pruning.ite_prune import IterativeSchedule
from slimkit.errors import ConfigError
from slimkit.evaluation import count_macs
from tests.engines.speedup.speedup_models import HeatmapNet, seeded


class Residual(nn.Module):
    """stem (3->8) -> [conv1 (8->6) -> conv2 (6->8)] + skip -> head: units stem+conv2 (residual) and conv1."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem, self.bn0 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv1, self.bn1 = nn.Conv2d(8, 6, 3, padding=1), nn.BatchNorm2d(6)
        self.conv2, self.bn2 = nn.Conv2d(6, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn0(self.stem(x)))
        h = F.relu(h + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(h))))))
        return self.head(h).mean(dim=(2, 3))


X = torch.rand(2, 3, 6, 6)


def test_units_follow_the_coupling_and_deploy_what_the_masks_computed():
    net = Residual().eval()
    units = ChannelUnits(net, X[:1])
    assert [(u.name, sorted(u.producers)) for u in units.units] == [
        ("stem_(0, 8)_8", ["conv2", "stem"]), ("conv1_(0, 6)_6", ["conv1"])]
    assert sorted(units.resolve("conv2").readers) == ["conv1", "head"]
    units.attach()
    units.resolve("stem").keep([0, 2, 5])
    units.choose(units.resolve("conv1"), 0.5, "l1")
    l1 = net.conv1.weight.detach().abs().flatten(1).sum(1)
    assert torch.nonzero(units.resolve("conv1").mask).flatten().tolist() == sorted(l1.argsort()[3:].tolist())
    with torch.no_grad():
        masked = net(X)
    kept = units.deploy()
    assert (net.stem.out_channels, net.conv2.out_channels, net.head.in_channels, net.conv1.out_channels) == (3, 3, 3, 3)
    assert kept["stem"]["out"] == [0, 2, 5]
    with torch.no_grad():
        torch.testing.assert_close(net(X), masked)


def test_group_fisher_prunes_channels_per_prune_each_interval():
    net = Residual()
    pruner = GroupFisherPruner(ChannelUnits(net, X[:1]), interval=2, normalization_type="none", channels_per_prune=3)
    for step in range(4):
        out = net(X)
        pruner.arm()  # the backward pass below runs the step
        F.mse_loss(out, torch.zeros(2, 4)).backward()
        assert pruner.iteration == step + 1 and len(pruner.history) == 3 * ((step + 1) // 2)
    assert sum(u.num_channels - u.activated_channels for u in pruner.units.units) == 6
    assert all(u.activated_channels >= 1 for u in pruner.units.units)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"interval": 0}, "interval"), ({"normalization_type": "l2"}, "normalization_type"),
    ({"target_macs_ratio": 1.5}, "target ratio"), ({"channels_per_prune": 0}, "channels_per_prune")])
def test_group_fisher_refuses_bad_settings(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        GroupFisherPruner(ChannelUnits(Residual(), X[:1]), **kwargs)


def test_dmcp_marginals_expected_width_and_macs():
    assert split_unit(64, 0.25, 1.0, 0.25) == (16, 3, 16)
    units = ChannelUnits(Residual(), X[:1])
    search = DMCPSearch(units, (0.5, 1.0, 0.25))
    unit = units.resolve("stem")
    assert search.layout[unit.name] == (2, 2, 4)
    with torch.no_grad():
        search.arch_params[unit.name.replace(".", "-")].copy_(torch.tensor([0.0, 1.0]))
    # keep group 1 with exp(-0) = 1, group 2 with exp(-1): expected width 4 + 2 * (1 + e^-1)
    assert float(search.expected_width(unit).detach()) == pytest.approx(4 + 2 * (1 + math.exp(-1.0)))
    search.set_subnet("min")
    assert unit.activated_channels == 4
    full = search.expected_macs()
    assert 0 < float(full.detach()) < units.macs.total
    full.backward()  # differentiable in the arch parameters
    assert search.arch_params[unit.name.replace(".", "-")].grad is not None


def test_iterative_schedule_and_dcff_temperature():
    schedule = IterativeSchedule({"u": 0.5, "v": 4}, {"u": 1.0, "v": 8}, step_freq=3, prune_times=2)
    assert [schedule.is_prune_time(i) for i in range(7)] == [True, False, False, True, False, False, False]
    assert schedule.prune_at(0) == {"u": 0.75, "v": 6} and schedule.prune_at(3) == {"u": 0.5, "v": 4}
    assert temperature(0, 100) == pytest.approx(1.0)
    assert temperature(100, 100) == pytest.approx(1e-4)
    with pytest.raises(ConfigError, match="step_freq"):
        IterativeSchedule({}, {}, step_freq=0)


def test_transposed_conv_head_units_macs_fisher_and_deploy():
    net = seeded(HeatmapNet)  # c2 is read by the transposed conv d1; d1 and d2 produce units of their own
    x = torch.randn(2, 3, 16, 16)
    units = ChannelUnits(net, x[:1])
    assert [u.name for u in units.units] == ["c1_(0, 8)_8", "c2_(0, 16)_16", "d1_(0, 12)_12", "d2_(0, 8)_8"]
    assert list(units.resolve("c2").readers) == ["d1"] and list(units.resolve("d1").readers) == ["d2"]
    # MACs: a transposed conv spreads each input element over out_channels x kernel outputs
    assert units.macs.full["d1"] == 16 * 4 * 4 * 12 * 4 * 4 and units.macs.full["d2"] == 12 * 8 * 8 * 8 * 3 * 3
    assert units.macs.total == count_macs(net, x[:1])
    pruner = GroupFisherPruner(units, interval=1, normalization_type="flops", channels_per_prune=2)
    for _ in range(3):
        out = net(x)
        pruner.arm()
        out.square().mean().backward()
    assert len(pruner.history) == sum(u.num_channels - u.activated_channels for u in units.units) == 6
    with torch.no_grad():
        masked = net(x)
    estimate = units.macs_ratio()
    dense_macs = units.macs.total
    kept = units.deploy()
    assert (net.d1.in_channels, net.d1.out_channels) == (units.resolve("c2").activated_channels,
                                                         units.resolve("d1").activated_channels)
    assert tuple(net.d1.weight.shape[:2]) == (net.d1.in_channels, net.d1.out_channels) and kept["d1"]["in"]
    assert count_macs(net, x[:1]) / dense_macs == pytest.approx(estimate)  # a chain: the estimate is exact
    with torch.no_grad():
        torch.testing.assert_close(net(x), masked)
