"""Issue 36: ``round_to`` keeps every coupled channel group's width on a multiple (oneDNN's 16-channel blocks)."""

from __future__ import annotations

import copy
import re

import pytest
import torch
from torch import nn

from slimkit import SmashConfig, smash
from slimkit.engines.pruning import L1FilterPruner, PruningConfigError
from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.pruning.group_fisher import GroupFisherPruner
from slimkit.engines.pruning.maskers import check_round_to, num_to_prune, round_kept, rounded_num_to_prune
from slimkit.engines.speedup import ModelSpeedup
from slimkit.errors import ConfigError
from tests.engines.pruning.conftest import TinyMobileNet


def wide_net() -> TinyMobileNet:
    """Wide enough for 16-channel rounding: 32 stem channels (192 inside the blocks), 48, a 96-channel head."""
    return TinyMobileNet((32, 48, 96))


def _pruned(model: nn.Module, x: torch.Tensor, **kwargs) -> nn.Module:
    model = copy.deepcopy(model)
    pruner = L1FilterPruner(model, [{"sparsity": 0.3, "op_types": ["Conv2d"]}], dependency_aware=True,
                            dummy_input=x, **kwargs)
    pruner.compress()
    masks = pruner.get_masks()
    model = pruner.unwrap_model(apply_masks=True)
    ModelSpeedup(model, x, masks).speedup_model()
    return model


def _conv_widths(model: nn.Module) -> dict[str, int]:
    return {n: m.out_channels for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_rounded_count_moves_the_kept_width_to_the_nearest_multiple():
    assert num_to_prune(0.3, 192) == 57  # 135 kept: 128 is nearer than 144
    assert rounded_num_to_prune(0.3, 192, 16) == 192 - 128
    assert rounded_num_to_prune(0.2, 192, 16) == 192 - 160  # 154 kept: 160 is nearer than 144
    assert rounded_num_to_prune(0.3, 96, 16) == 96 - 64  # 68 kept -> 64
    assert rounded_num_to_prune(0.5, 48, 16) == 48 - 32  # 24 kept: a tie keeps the larger count
    assert rounded_num_to_prune(0.05, 46, 16) == 46 - 32  # 44 kept -> 48 is above the width, so 32
    assert rounded_num_to_prune(0.5, 12, 16) == 0  # narrower than round_to: not pruned
    assert rounded_num_to_prune(0.99, 64, 16) == 64 - 16  # never 0 kept
    assert rounded_num_to_prune(0.0, 100, 16) == 0  # nothing asked, nothing rounded
    assert all(rounded_num_to_prune(s / 20, n, 1) == num_to_prune(s / 20, n) for s in range(20) for n in (1, 7, 96))


def test_round_to_16_gives_multiples_of_16_and_a_smaller_model_that_runs():
    torch.manual_seed(0)
    dense, x = wide_net().eval(), torch.randn(1, 3, 32, 32)
    unrounded, rounded = _pruned(dense, x), _pruned(dense, x, round_to=16)
    widths = _conv_widths(rounded)
    assert all(w % 16 == 0 for w in widths.values()), widths
    assert any(w % 16 for w in _conv_widths(unrounded).values())  # without it the widths are off the grid
    assert widths["features.1.conv.0.0"] == 128  # 192 -> 135 kept (unrounded) -> 128
    assert widths["features.0.0"] == 16 and widths["features.3.0"] == 64  # 23 -> 16, 68 -> 64
    assert _params(rounded) < _params(dense)
    with torch.no_grad():
        assert rounded(x).shape == (1, 10)


def test_round_to_1_is_the_default_behaviour():
    torch.manual_seed(0)
    dense, x = wide_net().eval(), torch.randn(1, 3, 32, 32)
    default, ones = _pruned(dense, x), _pruned(dense, x, round_to=1)
    assert _conv_widths(default) == _conv_widths(ones)
    for (name, a), (_, b) in zip(default.state_dict().items(), ones.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("bad", [0, -16, 2.5, "16", True])
def test_bad_round_to_is_a_clear_error(bad):
    with pytest.raises(PruningConfigError, match=r"round_to must be an integer >= 1 .*got " + re.escape(repr(bad))):
        check_round_to(bad)
    model, x = wide_net().eval(), torch.randn(1, 3, 32, 32)
    with pytest.raises(PruningConfigError, match=r"L1FilterPruner round_to must be an integer >= 1"):
        L1FilterPruner(model, [{"sparsity": 0.3}], dependency_aware=True, dummy_input=x, round_to=bad)


def test_smash_face_takes_round_to_and_refuses_zero():
    torch.manual_seed(0)
    model, x = wide_net().eval(), torch.randn(1, 3, 32, 32)
    cfg = SmashConfig({"l1_filter": {"sparsity": 0.3, "round_to": 16}}, device="cpu")
    cfg.add_example_inputs(x)
    small = smash(model, cfg, verbose=False).model
    convs = _conv_widths(small)
    assert convs["features.1.conv.0.0"] == 128 and all(w % 16 == 0 for w in convs.values()), convs
    with pytest.raises(ConfigError, match=r"l1_filter_round_to.*an integer in \[1, 4096\]"):
        SmashConfig({"l1_filter": {"round_to": 0}}, device="cpu")


def test_group_fisher_rounds_each_unit_after_pruning():
    torch.manual_seed(0)
    net, x = wide_net(), torch.randn(2, 3, 32, 32)
    pruner = GroupFisherPruner(ChannelUnits(net, x[:1]), interval=1, normalization_type="none",
                               channels_per_prune=25, round_to=16)
    for _ in range(3):
        out = net(x)
        pruner.arm()
        nn.functional.mse_loss(out, torch.zeros(2, 10)).backward()
    before = {u.name: u.activated_channels for u in pruner.units.units}
    assert len(pruner.history) == 75 and any(k % 16 for k in before.values())
    pruner.round_units()
    after = {u.name: u.activated_channels for u in pruner.units.units}
    assert any(after[n] > before[n] for n in after) and any(after[n] < before[n] for n in after)  # both ways
    for unit in pruner.units.units:
        assert after[unit.name] == round_kept(before[unit.name], unit.num_channels, 16)
        assert after[unit.name] % 16 == 0 or after[unit.name] == unit.num_channels
    pruner.deploy()
    assert all(w % 16 == 0 for w in _conv_widths(net).values()), _conv_widths(net)
    with pytest.raises(ConfigError, match="round_to must be an integer >= 1"):
        GroupFisherPruner(ChannelUnits(wide_net(), x[:1]), round_to=0)
