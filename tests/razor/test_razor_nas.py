"""One-shot NAS pieces: mutables, dynamic layers, the mutator, SPOS training, export, save / load."""

from __future__ import annotations

import json
import random

import pytest
import torch
import yaml
from torch import nn

from slimkit.engines.nas.dynamic_ops import DYNAMIC_OPS
from slimkit.engines.nas.mutables import BaseMutable
from slimkit.errors import ConfigError, SaveLoadError
from slimkit.razor import (
    SPOS,
    DynamicBatchNorm2d,
    DynamicConv2d,
    DynamicLinear,
    MutableChannels,
    MutableSequential,
    NasMutator,
    OneShotMutableOP,
    SearchableCNN,
    batch_loss,
    build,
    calibrate_bn,
    export_subnet,
    load_subnet,
    read_subnet,
    save_subnet,
    write_subnet,
)
from slimkit.training import fit

SMALL = dict(stage_widths=[[4, 8], [8, 12]], strides=[1, 2], kernel_choices=[3, 5], depth_choices=[0, 1, 2])


def small_spos(seed: int = 0) -> SPOS:
    torch.manual_seed(seed)
    return build(dict(type="SPOS", architecture=dict(type="SearchableCNN", **SMALL), mutator=dict(type="NasMutator")))


def test_dynamic_layers_slice_to_the_active_width():
    width = MutableChannels([4, 8, 16])
    conv, bn = DynamicConv2d(3, width, 3, padding=1), DynamicBatchNorm2d(width)
    head = DynamicLinear(width, [5, 10])
    assert conv.weight.shape == (16, 3, 3, 3) and head.weight.shape == (10, 16)
    x = torch.randn(2, 3, 6, 6)
    for w, out in ((4, 5), (8, 10), (16, 5)):
        width.current_choice = w
        head.out_mutable.current_choice = out
        y = bn(conv(x))
        assert y.shape == (2, w, 6, 6)
        assert head(y.mean((2, 3))).shape == (2, out)
    width.current_choice = 4
    before = bn.running_mean.clone()
    bn.train()(conv(x))
    assert not torch.equal(bn.running_mean[:4], before[:4]) and torch.equal(bn.running_mean[4:], before[4:])
    with pytest.raises(ConfigError, match="expects 4 input channels .* got 16"):
        bn(torch.randn(2, 16, 6, 6))


def test_mutable_op_and_depth_run_the_chosen_path():
    op = OneShotMutableOP({"k3": nn.Conv2d(2, 2, 3, padding=1), "k5": nn.Conv2d(2, 2, 5, padding=2)})
    x = torch.randn(1, 2, 7, 7)
    assert op.choices == ["k3", "k5"] and op.current_choice == "k5"
    assert torch.equal(op(x), op.candidates["k5"](x))
    op.current_choice = "k3"
    assert torch.equal(op(x), op.candidates["k3"](x))
    depth = MutableSequential([nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3)], depth_choices=[0, 1, 3])
    v = torch.randn(2, 3)
    depth.current_choice = 0
    assert torch.equal(depth(v), v)
    depth.current_choice = 1
    assert torch.equal(depth(v), depth.blocks[0](v))
    assert isinstance(depth.export(), nn.Sequential) and len(depth.export()) == 1
    with pytest.raises(ConfigError, match="'k4' is not a choice of this OneShotMutableOP. Did you mean .*'k3'.*"
                                          "Valid choices: 'k3', 'k5'"):
        op.current_choice = "k4"
    with pytest.raises(ConfigError, match=r"depth_choices must be ints in 0\.\.3"):
        MutableSequential([nn.Identity()] * 3, depth_choices=[4])
    with pytest.raises(ConfigError, match="positive integers"):
        MutableChannels([0, 8])
    with pytest.raises(ConfigError, match="names must be identifiers"):
        OneShotMutableOP({"3x3": nn.Identity()})


def test_mutator_lists_samples_every_choice_and_reports_subnets():
    spos = small_spos()
    mutator = spos.mutator
    space = mutator.search_space()
    assert space["stages.0.width"] == [4, 8] and space["stages.1.first"] == ["k3", "k5"]
    assert space["stages.0.extra"] == [0, 1, 2] and mutator.num_subnets() == 2 ** 8 * 3 ** 2
    rng = random.Random(0)
    seen = {name: set() for name in space}
    for _ in range(200):
        for name, choice in mutator.sample_choices(rng).items():
            seen[name].add(choice)
    assert {n: sorted(map(str, s)) for n, s in seen.items()} == {n: sorted(map(str, c)) for n, c in space.items()}
    subnet = mutator.sample_choices(random.Random(3))
    mutator.set_choices({n: {"chosen": c} for n, c in subnet.items()})
    assert mutator.current_choices() == subnet
    assert mutator.fix_subnet() == {n: {"chosen": c} for n, c in subnet.items()}
    with pytest.raises(ConfigError, match="'k4' is not a choice of mutable 'stages.0.first'.*Valid choices: 'k3'"):
        mutator.set_choices({**subnet, "stages.0.first": "k4"})
    with pytest.raises(ConfigError, match="no mutable 'stages.0.widht'. Did you mean 'stages.0.width'"):
        mutator.set_choices({"stages.0.widht": 4}, strict=False)
    with pytest.raises(ConfigError, match="does not set 'stages.0.width'"):
        mutator.set_choices({"stages.0.first": "k3"})
    assert mutator.current_choices() == subnet  # nothing changed by the failed calls
    with pytest.raises(ConfigError, match="has no mutables"):
        NasMutator(nn.Linear(2, 2))


def test_spos_trains_one_sampled_path_per_step_reproducibly():
    x, y = torch.rand(64, 1, 8, 8), torch.randint(0, 10, (64,))
    data = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
    runs = []
    for _ in range(2):
        spos = small_spos()
        paths: list[dict] = []
        original = spos.mutator.set_choices

        def record(subnet: dict, strict: bool = True, paths: list = paths, original=original) -> None:
            paths.append(dict(subnet))
            original(subnet, strict)

        spos.mutator.set_choices = record
        result = fit(spos, data, loss=batch_loss, epochs=3, seed=7, progress=False, num_threads=1)
        runs.append((paths, result.losses, spos.state_dict()))
    paths, losses, state = runs[0]
    assert len(paths) == 12 and len({json.dumps(p, sort_keys=True) for p in paths}) > 6  # a fresh path per step
    assert runs[1][0] == paths and runs[1][1] == losses
    assert all(torch.equal(state[k], runs[1][2][k]) for k in state)
    spos.eval()
    before = spos.mutator.current_choices()
    assert spos(x[:4], mode="predict").shape == (4,)
    spos(x[:4], y[:4], mode="loss")
    assert spos.mutator.current_choices() == before  # eval mode keeps the fixed subnet


def test_exported_subnet_is_plain_and_computes_exactly_the_same():
    spos = small_spos()
    fit(spos, [(torch.rand(32, 1, 8, 8), torch.randint(0, 10, (32,)))], loss=batch_loss, epochs=4, progress=False)
    spos.eval()
    x = torch.rand(8, 1, 8, 8)
    rng = random.Random(1)
    for _ in range(6):
        subnet = spos.mutator.sample_choices(rng)
        spos.set_subnet(subnet)
        exported = export_subnet(spos)
        assert not [m for m in exported.modules() if isinstance(m, (BaseMutable, *DYNAMIC_OPS))]
        convs = [m for m in exported.modules() if isinstance(m, nn.Conv2d)]
        assert all(type(m) is nn.Conv2d for m in convs) and type(exported.head) is nn.Linear
        assert exported.head.in_features == subnet["stages.1.width"]
        assert torch.equal(exported(x), spos(x))
    assert spos.mutator.current_choices() == subnet  # exporting leaves the supernet as it was


def test_save_and_load_round_trip_without_pickle(tmp_path):
    spos = small_spos()
    spos.eval()
    subnet = spos.mutator.sample_choices(random.Random(5))
    exported = save_subnet(spos, tmp_path / "subnet", subnet)
    files = sorted(p.name for p in (tmp_path / "subnet").iterdir())
    assert files == ["architecture.json", "model.safetensors", "subnet.json", "subnet.yaml"]
    description = {n: {"chosen": c} for n, c in subnet.items()}
    assert json.loads((tmp_path / "subnet" / "subnet.json").read_text()) == description
    assert yaml.safe_load((tmp_path / "subnet" / "subnet.yaml").read_text()) == description
    again = load_subnet(tmp_path / "subnet")
    x = torch.rand(4, 1, 8, 8)
    assert torch.equal(again(x), exported(x))
    # a user supernet without a saved config: loading needs supernet=
    torch.manual_seed(0)
    user = nn.Sequential(DynamicConv2d(1, [2, 4], 3), nn.Flatten())
    save_subnet(user, tmp_path / "user", {"0.out_mutable": 2})
    with pytest.raises(SaveLoadError, match="pass supernet="):
        load_subnet(tmp_path / "user")
    torch.manual_seed(1)
    other = nn.Sequential(DynamicConv2d(1, [2, 4], 3), nn.Flatten())
    restored = load_subnet(tmp_path / "user", supernet=other)
    assert torch.equal(restored[0].weight, user[0].weight[:2])
    with pytest.raises(SaveLoadError, match="is missing"):
        load_subnet(tmp_path / "nothing")


def test_subnet_files_in_json_and_yaml(tmp_path):
    subnet = {"a": 3, "b": "k5"}
    for name in ("s.json", "s.yaml"):
        write_subnet(subnet, tmp_path / name)
        assert read_subnet(tmp_path / name) == {"a": {"chosen": 3}, "b": {"chosen": "k5"}}
    with pytest.raises(ConfigError, match=r"must end in \.json, \.yaml or \.yml"):
        write_subnet(subnet, tmp_path / "s.txt")
    with pytest.raises(ConfigError, match="without 'chosen'"):
        write_subnet({"a": {"choice": 3}}, tmp_path / "s.json")


def test_calibrate_bn_recomputes_statistics_and_restores_modes():
    net = SearchableCNN(**SMALL)
    net.eval()
    bn = net.stages[0].first.candidates["k3"][1]
    bn.momentum = 0.3
    net.stages[0].first.current_choice = "k3"
    data = [(torch.rand(16, 1, 8, 8) * 5,) for _ in range(3)]
    calibrate_bn(net, data)
    assert not net.training and bn.momentum == 0.3 and int(bn.num_batches_tracked) == 3
    assert float(bn.running_mean[: net.stages[0].width.current_choice].abs().sum()) > 0
    with pytest.raises(ConfigError, match="got no batch"):
        calibrate_bn(net, [])


def test_mutables_build_from_config_dicts():
    op = build(dict(type="OneShotMutableOP", init_choice="k3", candidates=dict(
        k3=dict(type="DynamicConv2d", in_channels=1, out_channels=[2, 4], kernel_size=3, padding=1),
        k5=dict(type="DynamicConv2d", in_channels=1, out_channels=[2, 4], kernel_size=5, padding=2))))
    assert op.current_choice == "k3" and isinstance(op.candidates["k5"], DynamicConv2d)
    assert sorted(NasMutator(op).search_space()) == ["", "candidates.k3.out_mutable", "candidates.k5.out_mutable"]
    assert op(torch.rand(1, 1, 6, 6)).shape == (1, 4, 6, 6)
    with pytest.raises(ConfigError, match="Valid choices: 'k3', 'k5'"):
        build(dict(type="OneShotMutableOP", init_choice="k7", candidates=dict(k3=nn.Identity(), k5=nn.Identity())))
