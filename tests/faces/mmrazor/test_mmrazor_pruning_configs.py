"""MMRazor's channel pruning from our own MMRazor-style configs (configs/pruning/): GroupFisher, ItePrune (l1-norm),
DCFF, DMCP, SlimmableNetwork.

Each config is read as MMRazor writes it (scoped bases skipped, the user's network passed as ``architecture``),
built, trained a few steps with slimkit's loop and deployed: the result is physically smaller, computes what the
masked network computed, and its ``kept_channels`` replay on a fresh network. GroupFisher's pruned channel is
recomputed here from the activations and gradients of a tiny network.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.engines.speedup import apply_kept_channels
from slimkit.errors import ConfigError
from slimkit.evaluation import count_parameters
from slimkit.razor import (
    DCFF,
    DMCP,
    GroupFisherAlgorithm,
    ItePruneAlgorithm,
    SlimmableNetwork,
    batch_loss,
    build,
    load_config,
)
from slimkit.training import fit
from tests.faces.mmrazor.mm_models import images, out_channels, tiny_resnet

PRUNING = Path(__file__).parent / "configs" / "pruning"
X16 = images(4, size=16)


def trained(config: str, steps: int = 4, **overrides) -> tuple[nn.Module, nn.Module, dict]:
    """(algorithm after ``steps`` training steps, a copy of the untouched network, the config's model dict)."""
    cfg = load_config(PRUNING / config)
    net = tiny_resnet()
    base = copy.deepcopy(net)
    algo = build(cfg.model, architecture=net, **overrides)
    fit(algo, X16, loss=batch_loss, steps=steps, lr=1e-3, seed=0, progress=False, num_threads=1)
    return algo, base, cfg.model


def deployed_matches_masked(algo) -> nn.Module:
    """Deploy; the shrunk network computes what the masked one did, and its record replays on a fresh copy."""
    x = X16[0][0]
    algo.eval()
    with torch.no_grad():
        masked = algo(x, mode="tensor")
    small = algo.deploy()
    with torch.no_grad():
        torch.testing.assert_close(small(x), masked, atol=1e-4, rtol=1e-4)
    fresh = apply_kept_channels(tiny_resnet(), algo.kept_channels)
    fresh.load_state_dict(small.state_dict(), strict=True)
    fresh.eval()
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), small(x))
    return small


# --- GroupFisher ------------------------------------------------------------------------------------------------
class Chain(nn.Module):
    """conv a (3->4) -> bn -> relu -> conv b (4->5) -> bn -> relu -> conv c (5->8) -> pool -> fc."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.bn_a = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.b, self.bn_b = nn.Conv2d(4, 5, 3, padding=1), nn.BatchNorm2d(5)
        self.c = nn.Conv2d(5, 8, 1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn_a(self.a(x)))
        h = F.relu(self.bn_b(self.b(h)))
        return self.fc(F.adaptive_avg_pool2d(self.c(h), 1).flatten(1))


def expected_first_pruned(net: Chain, x: torch.Tensor, y: torch.Tensor, normalization: str) -> tuple[str, int]:
    """Recompute GroupFisher's first choice: (sum_hw x*dL/dx)^2 summed over the batch at b's and c's inputs."""
    seen = {}
    hooks = [m.register_forward_pre_hook(lambda m, a, k=k: seen.__setitem__(k, a[0].retain_grad() or a[0]))
             for k, m in (("b", net.b), ("c", net.c))]
    F.cross_entropy(net(x), y).backward()
    for h in hooks:
        h.remove()
    fisher = {k: ((v.detach() * v.grad).sum(dim=(2, 3)) ** 2).sum(0) for k, v in seen.items()}
    hw = x.shape[2] * x.shape[3]
    if normalization == "flops":  # producer: H*W*k*k*in, reader: H*W*k*k*out (GMACs)
        delta = {"b": (hw * 9 * 3 + hw * 9 * 5) / 1e9, "c": (hw * 9 * 4 + hw * 1 * 8) / 1e9}
    else:  # act: H*W of the producer's output (M elements)
        delta = {"b": hw / 1e6, "c": hw / 1e6}
    scores = {k: fisher[k].double() / delta[k] for k in fisher}
    unit = min(scores, key=lambda k: float(scores[k].min()))
    return {"b": "a", "c": "b"}[unit], int(scores[unit].argmin())


@pytest.mark.parametrize("normalization", ["flops", "act"])
def test_group_fisher_prunes_the_channel_of_least_normalised_fisher_information(normalization):
    x, y = torch.rand(6, 3, 6, 6), torch.randint(10, (6,))
    layer, channel = expected_first_pruned(Chain(), x, y, normalization)
    algo = build(dict(type="GroupFisherAlgorithm", architecture=Chain(), interval=1, mutator=dict(
        type="GroupFisherChannelMutator", parse_cfg=dict(type="ChannelAnalyzer", demo_input=(1, 3, 6, 6)),
        channel_unit_cfg=dict(type="GroupFisherChannelUnit", default_args=dict(normalization_type=normalization)))))
    assert isinstance(algo, GroupFisherAlgorithm)
    # c's channels are read by the Linear head: left alone (mutate_linear=False, MMRazor's default)
    assert [u.name for u in algo.mutator.mutable_units] == ["a_(0, 4)_4", "b_(0, 5)_5"]
    fit(algo, [(x, y)], loss=batch_loss, steps=1, lr=1e-3, progress=False, num_threads=1)
    net = algo.deploy()
    assert algo.pruner.history[0][:2] == (f"{layer}_(0, {4 if layer == 'a' else 5})_{4 if layer == 'a' else 5}",
                                          channel)
    widths = {"a": 4, "b": 5}
    widths[layer] -= 1
    assert (net.a.out_channels, net.b.in_channels, net.b.out_channels, net.c.in_channels) == (
        widths["a"], widths["a"], widths["b"], widths["b"])
    assert count_parameters(net) == count_parameters(Chain()) - (
        9 * 3 + 1 + 2 + 9 * 5 if layer == "a" else 9 * 4 + 1 + 2 + 8)


def test_group_fisher_config_prunes_every_interval_and_deploys_smaller():
    algo, base, model = trained("group_fisher_act_prune_resnet18_tiny.py", steps=4)
    assert model.interval == 2 and algo.mutator.normalization_type == "act"
    assert algo.pruner.iteration == 4 and len(algo.pruner.history) == 2  # after steps 2 and 4
    small = deployed_matches_masked(algo)
    removed = {}
    for unit_name, _, _ in algo.pruner.history:
        removed[unit_name] = removed.get(unit_name, 0) + 1
    for unit_name, n in removed.items():
        producer = unit_name.split("_(")[0]
        assert out_channels(small, producer) == out_channels(base, producer) - n
    assert count_parameters(small) < count_parameters(base)


def test_group_fisher_stops_at_the_target_flop_ratio():
    algo = build(dict(type="GroupFisherAlgorithm", architecture=Chain(), interval=1, target_flop_ratio=0.8,
                      mutator=dict(type="GroupFisherChannelMutator", parse_cfg=dict(demo_input=(1, 3, 6, 6)))))
    batches = [(torch.rand(4, 3, 6, 6), torch.randint(10, (4,))) for _ in range(12)]
    fit(algo, batches, loss=batch_loss, steps=12, lr=1e-3, progress=False, num_threads=1)
    ratio = algo.units.macs_ratio()
    assert ratio <= 0.8 < ratio + 0.25  # stopped at the first prune that got there
    assert 0 < len(algo.pruner.history) < 11


# --- ItePrune (l1-norm) -----------------------------------------------------------------------------------------
def test_l1_norm_config_prunes_on_its_schedule_keeping_the_largest_filters():
    cfg = load_config(PRUNING / "l1-norm_resnet18_tiny.py")
    net = tiny_resnet()
    base = copy.deepcopy(net)
    algo = build(cfg.model, architecture=net)
    assert isinstance(algo, ItePruneAlgorithm)
    # lr=0: the weights stay, so the kept filters must be the base network's largest
    frozen = torch.optim.SGD(algo.parameters(), lr=0.0)
    fit(algo, X16[:1], loss=batch_loss, steps=1, optimizer=frozen, progress=False, num_threads=1)
    unit = algo.units.resolve("backbone.layer1.0.conv1_(0, 8)_8")
    assert unit.activated_channels == 6  # prune time 1 of 2 (step 0): halfway from 8 to 4
    fit(algo, X16, loss=batch_loss, steps=3, optimizer=frozen, progress=False, num_threads=1)
    assert unit.activated_channels == 4  # prune time 2 (step 2)
    small = deployed_matches_masked(algo)
    assert {n: out_channels(small, n) for n in ("backbone.layer1.0.conv1", "backbone.layer1.1.conv1",
                                                "backbone.layer2.0.conv1", "backbone.layer3.0.conv1",
                                                "backbone.layer3.1.conv1", "backbone.conv1")} == {
        "backbone.layer1.0.conv1": 4, "backbone.layer1.1.conv1": 4, "backbone.layer2.0.conv1": 12,
        "backbone.layer3.0.conv1": 24, "backbone.layer3.1.conv1": 32, "backbone.conv1": 8}
    w = base.get_submodule("backbone.layer2.0.conv1").weight.detach()
    top = torch.argsort(w.abs().flatten(1).sum(1), descending=True)[:12].sort().values
    torch.testing.assert_close(small.get_submodule("backbone.layer2.0.conv1").weight, w[top])
    assert count_parameters(small) < count_parameters(base)


# --- DCFF -------------------------------------------------------------------------------------------------------
def test_dcff_config_fuses_filters_and_deploys_the_fused_convs():
    algo, base, _ = trained("dcff_resnet18_tiny.py", steps=2)
    assert isinstance(algo, DCFF) and algo.schedule.prune_times == 10000  # prune_times=0: until max_iters
    conv = algo.architecture.get_submodule("backbone.layer1.0.conv1")
    unit = algo.units.resolve("backbone.layer1.0.conv1")
    kept = torch.nonzero(unit.mask).flatten()
    raw = conv.parametrizations.weight.original.detach()
    mix = conv.parametrizations.weight[0].mix
    torch.testing.assert_close(conv.weight.detach()[kept], (mix[kept] @ raw.flatten(1)).view(len(kept), *raw.shape[1:]))
    assert torch.allclose(mix[kept].sum(1), torch.ones(len(kept), dtype=mix.dtype))  # rows of a softmax
    small = deployed_matches_masked(algo)
    assert out_channels(small, "backbone.layer1.0.conv1") == 4
    assert [out_channels(small, n) for n in ("backbone.layer2.0.conv2", "backbone.layer2.0.downsample.0",
                                             "backbone.layer2.1.conv2")] == [12, 12, 12]  # one residual unit
    assert count_parameters(small) < count_parameters(base)


# --- DMCP -------------------------------------------------------------------------------------------------------
def test_dmcp_config_trains_subnets_and_architecture_and_exports_the_expected_width():
    algo, base, _ = trained("dmcp_resnet18_tiny_supernet.py", steps=2)
    assert isinstance(algo, DMCP)
    unit = algo.units.resolve("backbone.layer4.0.conv1")
    assert algo.search.layout[unit.name] == (16, 3, 16)  # pruning_cfg (0.25, 1, 0.25) of 64 channels
    assert any(float(p.detach().abs().sum()) > 0 for p in algo.search.arch_params.values())  # the arch step moved them
    algo.train()
    losses = algo(*X16[0], mode="loss")
    assert {k.split(".")[0] for k in losses} >= {"max_subnet0", "min_subnet1", "arch", "flops"}
    assert "min_subnet1.loss_distill" in losses
    widths = algo.search.export_widths()
    small = algo.deploy()
    for name, width in widths.items():
        assert out_channels(small, name.split("_(")[0]) == width
    assert count_parameters(small) <= count_parameters(base)


# --- SlimmableNetwork -------------------------------------------------------------------------------------------
def test_slimmable_config_trains_every_width_and_deploys_one():
    algo, base, _ = trained("slimmable_resnet18_tiny.py", steps=2)
    assert isinstance(algo, SlimmableNetwork) and algo.num_subnet == 3
    algo.train()
    assert set(algo(*X16[0], mode="loss")) == {"subnet_0.loss", "subnet_1.loss", "subnet_2.loss"}
    stats = [algo.widths._stats[i]["backbone.layer1.0.bn2"]["running_mean"] for i in range(3)]
    assert not torch.equal(stats[0], stats[2])  # switchable statistics: bn2 reads the slimmed conv1's channels
    algo.set_subnet(2)
    small = deployed_matches_masked(algo)
    assert [out_channels(small, n) for n in ("backbone.layer1.0.conv1", "backbone.layer2.1.conv1")] == [4, 8]
    assert torch.equal(small.get_submodule("backbone.layer1.0.bn2").running_mean, stats[2])
    assert count_parameters(small) < count_parameters(base)


def test_slimmable_deploy_index_keeps_that_width_at_build():
    cfg = load_config(PRUNING / "slimmable_resnet18_tiny.py")
    algo = build(cfg.model, architecture=tiny_resnet(), deploy_index=1)
    assert algo.is_deployed and out_channels(algo.architecture, "backbone.layer2.0.conv1") == 12


# --- bad configs ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("cfg", "message"), [
    (dict(type="GroupFisherAlgorithm", interval=0), "interval must be an integer >= 1"),
    (dict(type="GroupFisherAlgorithm", mutator=dict(type="GroupFisherChannelMutator", channel_unit_cfg=dict(
        type="GroupFisherChannelUnit", default_args=dict(normalization_type="memory")))), "normalization_type"),
    (dict(type="GroupFisherAlgorithm", mutator=dict(type="ChannelMutator")), "needs a GroupFisherChannelMutator"),
    (dict(type="ItePruneAlgorithm", mutator_cfg=dict(type="ChannelMutator", channel_unit_cfg=dict(
        type="L2MutableChannelUnit"))), "Did you mean 'L1MutableChannelUnit'"),
    (dict(type="ItePruneAlgorithm", target_pruning_ratio={"backbone.layer9.conv1_(0, 8)_8": 0.5}), "no channel unit"),
    (dict(type="ItePruneAlgorithm", target_pruning_ratio={"backbone.layer1.0.conv1_(0, 8)_8": 1.5}), "ratio"),
    (dict(type="ItePruneAlgorithm", step_freq=0), "step_freq must be an integer >= 1"),
    (dict(type="ChannelMutator", parse_cfg=dict(type="FxTracer")), "parse_cfg type"),
    (dict(type="DMCP", strategy=["max", "biggest"]), "strategy entries"),
    (dict(type="DMCP", mutator_cfg=dict(type="DMCPChannelMutator", pruning_cfg=(0.5, 0.2, 0.1))), "pruning_cfg"),
    (dict(type="SlimmableNetwork"), "needs channel_unit_cfg.units"),
    (dict(type="SlimmableNetwork", mutator=dict(type="SlimmableChannelMutator", channel_unit_cfg=dict(
        type="SlimmableChannelUnit", units="missing.json"))), ".json file"),
])
def test_bad_pruning_configs_are_refused_clearly(cfg, message):
    parse = dict(type="ChannelAnalyzer", demo_input=(1, 3, 16, 16))
    cfg = copy.deepcopy(cfg)
    if cfg["type"] != "ChannelMutator":
        key = "mutator_cfg" if cfg["type"] in ("ItePruneAlgorithm", "DCFF", "DMCP") else "mutator"
        default = {"GroupFisherAlgorithm": "GroupFisherChannelMutator", "DMCP": "DMCPChannelMutator",
                   "SlimmableNetwork": "SlimmableChannelMutator"}.get(cfg["type"], "ChannelMutator")
        cfg.setdefault(key, dict(type=default))
        cfg[key].setdefault("parse_cfg", parse)
        cfg["architecture"] = tiny_resnet()
    with pytest.raises(ConfigError, match=message):
        build(cfg)
