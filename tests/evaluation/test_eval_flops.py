"""count_flops_params: NNI's per-layer FLOPs / parameter table, per sample, respecting pruning masks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.engines.pruning import L1FilterPruner
from slimkit.errors import ConfigError
from slimkit.evaluation.flops import count_flops_params


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=4, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.grouped(torch.relu(self.conv(x))))
        return self.fc(x.flatten(1))


def test_counts_per_sample_macs_and_parameters(capsys):
    model = Net()
    flops, params, rows = count_flops_params(model, (5, 3, 4, 4))  # the batch of 5 does not change the count
    conv, grouped, fc = (4 * 4 * 8 * 27), (4 * 4 * 8 * 2 * 9), 128 * 10
    assert [r["name"] for r in rows] == ["conv", "grouped", "fc"]
    assert [r["flops"] for r in rows] == [conv, grouped, fc] and flops == conv + grouped + fc
    assert params == 8 * 27 + 8 + 8 * 2 * 9 + 1280 + 10  # BatchNorm is not counted in the default mode
    assert rows[0]["weight_shape"] == (8, 3, 3, 3) and rows[0]["input_size"] == (5, 3, 4, 4)
    assert rows[2]["output_size"] == (5, 10) and rows[2]["module_type"] == "Linear"
    out = capsys.readouterr().out
    assert "| Index | Name    |  Type  |" in out and f"FLOPs total: {flops}" in out
    assert f"#Params total: {params}" in out
    full, _, rows = count_flops_params(model, torch.randn(2, 3, 4, 4), mode="full", verbose=False)
    assert [r["name"] for r in rows] == ["conv", "grouped", "bn", "fc"]
    assert full == flops + 4 * 4 * 8 + 2 * 128 + 10  # + conv and fc biases + BatchNorm's 2 ops per element


def test_masks_of_a_wrapped_layer_count_only_kept_channels():
    model = Net()
    before, _, _ = count_flops_params(model, (1, 3, 4, 4), verbose=False)
    pruner = L1FilterPruner(model, [{"sparsity": 0.5, "op_names": ["conv"]}])
    pruner.compress()
    after, _, rows = count_flops_params(model, (1, 3, 4, 4), verbose=False)
    assert rows[0]["name"] == "conv" and rows[0]["flops"] == 4 * 4 * 4 * 27  # half the output channels
    assert after == before - 4 * 4 * 4 * 27


def test_custom_ops_shared_layers_and_errors(capsys):
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    flops, params, rows = count_flops_params(model, torch.randn(1, 4))
    assert [r["name"] for r in rows] == ["0", "0"] and flops == 32 and params == 20  # one layer, called twice
    assert "#Call" in capsys.readouterr().out
    own = {nn.Linear: lambda m, i, o: {"flops": 7}}
    assert count_flops_params(nn.Sequential(nn.Linear(4, 4)), (1, 4), custom_ops=own, verbose=False)[0] == 7
    with pytest.raises(ConfigError, match=r"mode must be 'default' or 'full'"):
        count_flops_params(model, (1, 4), mode="all")
    with pytest.raises(ConfigError, match=r"needs the input shape as a tuple of ints"):
        count_flops_params(model, "1x4")
    with pytest.raises(ConfigError, match=r"needs a torch.nn.Module"):
        count_flops_params(object(), (1, 4))
