"""spos_search's bad input: no data, a model it cannot search, constraints no subnet meets."""

from __future__ import annotations

import pytest
from torch import nn

from slimkit import SmashConfig, smash, zoo
from slimkit.errors import ConfigError, MissingComponentError, ModelNotSupportedError

FAST = {"supernet_steps": 2, "num_candidates": 2, "top_k": 1, "max_epochs": 1, "steps": 1, "num_threads": 1}


def _config(data: bool = True, **hps) -> SmashConfig:
    cfg = SmashConfig()
    cfg["distiller"] = "spos_search"
    if data:
        cfg.add_data("Digits")
    for key, value in {**FAST, **hps}.items():
        cfg[f"spos_search_{key}"] = value
    return cfg


def test_no_data_names_the_add_data_call():
    with pytest.raises(MissingComponentError, match=r"spos_search needs a dataset; add one with cfg\.add_data"):
        smash(zoo.build("digits_cnn"), _config(data=False))


def test_a_model_without_conv_or_linear_is_refused():
    with pytest.raises(ModelNotSupportedError, match="searches the channel widths of CNNs whose channels flow"):
        smash(nn.Sequential(nn.ReLU()), _config())


def test_a_model_with_nothing_to_search_lists_the_supported_shapes():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))  # its only channels are the model output
    with pytest.raises(ConfigError) as err:
        smash(model, _config())
    text = str(err.value)
    assert "Sequential has no channel group whose width can be searched" in text
    assert "1: its channels reach the model output" in text and "e.g. slimkit's zoo model digits_cnn" in text


def test_constraints_no_subnet_meets_say_the_smallest_reachable_flops():
    with pytest.raises(ConfigError) as err:
        smash(zoo.build("digits_cnn"), _config(flops_ratio=0.01, width_ratios=[0.5, 1.0]))
    text = str(err.value)
    assert "spos_search: no subnet meets the limits; even the narrowest one" in text
    assert "'widths.features_0': 16" in text and "flops 347,392 > limit 13,501" in text  # 1% of 1,350,144
    assert "Raise spos_search_flops_ratio" in text


def test_a_params_limit_is_checked_too():
    with pytest.raises(ConfigError, match=r"params [\d,]+ > limit 1,000"):
        smash(zoo.build("digits_cnn"), _config(max_params=1000))


def test_bad_width_ratios_are_refused_when_set():
    with pytest.raises(ConfigError, match="width_ratios"):
        _config(width_ratios=[0.0, 2.0])
