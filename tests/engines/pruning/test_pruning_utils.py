"""Sensitivity analysis, its table and its plot."""

from __future__ import annotations

import copy

import pytest
import torch

from slimkit.engines.pruning import (
    PrunerModuleWrapper,
    PruningConfigError,
    format_sensitivity_table,
    plot_sensitivity,
    sensitivity_analysis,
)
from slimkit.errors import ConfigError


def _pruned_filter_count(model) -> float:
    """An 'evaluation' whose answer we know: how many filters the active masks remove."""
    total = 0
    for module in model.modules():
        if isinstance(module, PrunerModuleWrapper):
            mask = module.weight_mask
            total += int((mask.reshape(mask.shape[0], -1).sum(1) == 0).sum())
    return float(total)


def test_sensitivity_prunes_one_layer_at_a_time_and_restores(convnet):
    before = copy.deepcopy(convnet.state_dict())
    result = sensitivity_analysis(convnet, _pruned_filter_count, sparsities=(0.25, 0.5, 0.75))
    assert result == {
        "conv1": {0.25: 2.0, 0.5: 4.0, 0.75: 6.0},
        "conv2": {0.25: 4.0, 0.5: 8.0, 0.75: 12.0},
        "fc": {0.25: 2.0, 0.5: 5.0, 0.75: 7.0},
    }
    assert not any(isinstance(m, PrunerModuleWrapper) for m in convnet.modules())
    assert all(torch.equal(convnet.state_dict()[k], v) for k, v in before.items())


def test_sensitivity_on_real_data(convnet, digits):
    x = digits[0][:256]
    with torch.no_grad():
        reference = convnet(x)

    def deviation(model):
        with torch.no_grad():
            return float((model(x) - reference).abs().mean())

    result = sensitivity_analysis(convnet, deviation, sparsities=(0.5, 0.9), op_types=["Conv2d"], pruner="level")
    assert list(result) == ["conv1", "conv2"]
    assert all(v > 0 for row in result.values() for v in row.values())
    assert result["conv1"][0.9] > result["conv1"][0.5]
    assert deviation(convnet) == 0.0  # the model is back to its unpruned self


def test_sensitivity_errors(convnet):
    with pytest.raises(PruningConfigError, match=r"must be a number in \(0, 1\), got 1.0"):
        sensitivity_analysis(convnet, _pruned_filter_count, sparsities=(0.5, 1.0))
    with pytest.raises(ConfigError, match="Unknown algorithm 'l9'"):
        sensitivity_analysis(convnet, _pruned_filter_count, pruner="l9")
    with pytest.raises(PruningConfigError, match="op_name 'conv3' is not a layer"):
        sensitivity_analysis(convnet, _pruned_filter_count, op_names=["conv3"])


def test_format_table():
    table = format_sensitivity_table({"conv1": {0.25: 0.9, 0.5: 0.75}, "features.0": {0.5: 0.5}}, baseline=0.95,
                                     precision=2)
    assert table.splitlines() == [
        "layer       baseline  s=0.25  s=0.5",
        "----------  --------  ------  -----",
        "conv1           0.95    0.90   0.75",
        "features.0      0.95       -   0.50",
    ]


def test_plot_writes_png_atomically(tmp_path):
    path = plot_sensitivity({"conv1": {0.25: 0.9, 0.5: 0.7}, "fc": {0.25: 0.95, 0.5: 0.9}}, tmp_path / "out" / "s.png",
                            baseline=0.97)
    assert path == tmp_path / "out" / "s.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in path.parent.iterdir()] == ["s.png"]
