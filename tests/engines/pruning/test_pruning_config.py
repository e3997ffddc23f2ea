"""config_list rules and their error messages."""

from __future__ import annotations

import pytest
from torch import nn

from slimkit.engines.pruning import L1FilterPruner, PruningConfigError, SlimEngine, resolve_config_list
from slimkit.errors import ConfigError

DEFAULT = ("Conv2d", "Linear")


def test_default_expands_to_pruner_types(convnet):
    resolved = resolve_config_list(convnet, [{"sparsity": 0.5, "op_types": ["default"]}], DEFAULT)
    assert list(resolved) == ["conv1", "conv2", "fc"]
    assert resolved["conv1"] == {"sparsity": 0.5, "op_types": ["default"], "op_type": "Conv2d"}


def test_missing_op_types_and_names_means_default(convnet):
    assert list(resolve_config_list(convnet, [{"sparsity": 0.3}], DEFAULT)) == ["conv1", "conv2", "fc"]


def test_later_entries_override_earlier_per_layer(convnet):
    config_list = [
        {"sparsity": 0.8, "op_types": ["Conv2d"]},
        {"sparsity": 0.6, "op_names": ["conv1"]},
        {"exclude": True, "op_names": ["conv2"]},
    ]
    resolved = resolve_config_list(convnet, config_list, DEFAULT)
    assert list(resolved) == ["conv1"]
    assert resolved["conv1"]["sparsity"] == 0.6
    # an exclusion can itself be overridden by a later entry
    resolved = resolve_config_list(convnet, config_list + [{"sparsity": 0.1, "op_names": ["conv2"]}], DEFAULT)
    assert {k: v["sparsity"] for k, v in resolved.items()} == {"conv1": 0.6, "conv2": 0.1}


def test_op_types_and_op_names_intersect(convnet):
    resolved = resolve_config_list(
        convnet, [{"sparsity": 0.5, "op_types": ["Linear"], "op_names": ["fc", "conv1"]}], DEFAULT
    )
    assert list(resolved) == ["fc"]


def test_sparsity_per_layer_alias(convnet):
    resolved = resolve_config_list(convnet, [{"sparsity_per_layer": 0.25, "op_names": ["fc"]}], DEFAULT)
    assert resolved == {"fc": {"sparsity": 0.25, "op_names": ["fc"], "op_type": "Linear"}}


def test_module_type_from_model_is_accepted(convnet):
    class Custom(nn.Linear):
        pass

    convnet.extra = Custom(2, 2)
    assert list(resolve_config_list(convnet, [{"sparsity": 0.5, "op_types": ["Custom"]}], DEFAULT)) == ["extra"]


@pytest.mark.parametrize("bad", [1.0, -0.1, 1.5])
def test_sparsity_out_of_range(convnet, bad):
    with pytest.raises(PruningConfigError, match=r"config_list\[0\]\['sparsity'\] = .* is outside \[0, 1\)"):
        resolve_config_list(convnet, [{"sparsity": bad}], DEFAULT)


def test_sparsity_wrong_type_and_missing(convnet):
    with pytest.raises(PruningConfigError, match=r"must be a number in \[0, 1\), got '0.5'"):
        resolve_config_list(convnet, [{"sparsity": "0.5"}], DEFAULT)
    with pytest.raises(PruningConfigError, match=r"config_list\[1\] has no 'sparsity'"):
        resolve_config_list(convnet, [{"sparsity": 0.5}, {"op_types": ["Conv2d"]}], DEFAULT)
    with pytest.raises(PruningConfigError, match="both 'sparsity' and 'sparsity_per_layer'"):
        resolve_config_list(convnet, [{"sparsity": 0.5, "sparsity_per_layer": 0.5}], DEFAULT)


def test_unknown_key_lists_allowed_keys(convnet):
    with pytest.raises(PruningConfigError) as info:
        resolve_config_list(convnet, [{"sparsty": 0.5}], DEFAULT)
    message = str(info.value)
    assert "unknown key 'sparsty'" in message
    assert "Did you mean 'sparsity'" in message
    assert ("Allowed keys: exclude, op_names, op_partial_names, op_types, sparsity, sparsity_per_layer, "
            "total_sparsity.") in message
    assert isinstance(info.value, ConfigError)


def test_unknown_op_name_lists_real_names_closest_first(convnet):
    with pytest.raises(PruningConfigError) as info:
        resolve_config_list(convnet, [{"sparsity": 0.5, "op_names": ["conv_2"]}], DEFAULT)
    message = str(info.value)
    assert "op_name 'conv_2' is not a layer of this model" in message
    names = message.split("Layer names (closest first): ")[1].rstrip(".").split(", ")
    assert names[0] == "conv2"
    assert set(names) == {"conv1", "bn1", "conv2", "bn2", "fc"}


def test_unknown_op_type(convnet):
    with pytest.raises(PruningConfigError) as info:
        resolve_config_list(convnet, [{"sparsity": 0.5, "op_types": ["Conv2D"]}], DEFAULT)
    message = str(info.value)
    assert "op_type 'Conv2D' is not a torch.nn class name" in message
    assert "Did you mean 'Conv2d'" in message
    assert "Types in this model: BatchNorm2d, Conv2d, Linear" in message


def test_entry_selecting_nothing(convnet):
    with pytest.raises(PruningConfigError, match=r"config_list\[0\] selects no layer: .*'Conv1d'"):
        resolve_config_list(convnet, [{"sparsity": 0.5, "op_types": ["Conv1d"]}], DEFAULT)
    with pytest.raises(PruningConfigError, match=r"selects no layer: .*op_names \{'bn1': 'BatchNorm2d'\}"):
        resolve_config_list(convnet, [{"sparsity": 0.5, "op_types": ["Linear"], "op_names": ["bn1"]}], DEFAULT)


def test_exclude_rules(convnet):
    with pytest.raises(PruningConfigError, match="'exclude': True but selects nothing"):
        resolve_config_list(convnet, [{"sparsity": 0.5}, {"exclude": True}], DEFAULT)
    with pytest.raises(PruningConfigError, match=r"\['exclude'\] must be True or False, got 'yes'"):
        resolve_config_list(convnet, [{"sparsity": 0.5, "exclude": "yes"}], DEFAULT)
    resolved = resolve_config_list(convnet, [{"sparsity": 0.5, "exclude": False, "op_names": ["fc"]}], DEFAULT)
    assert list(resolved) == ["fc"]


def test_shape_errors(convnet):
    with pytest.raises(PruningConfigError, match="config_list must be a list of dicts"):
        resolve_config_list(convnet, {"sparsity": 0.5}, DEFAULT)
    with pytest.raises(PruningConfigError, match="config_list is empty"):
        resolve_config_list(convnet, [], DEFAULT)
    with pytest.raises(PruningConfigError, match=r"config_list\[0\] must be a dict"):
        resolve_config_list(convnet, [0.5], DEFAULT)
    with pytest.raises(PruningConfigError, match=r"\['op_types'\] must be a list of strings, got 'Conv2d'"):
        resolve_config_list(convnet, [{"sparsity": 0.5, "op_types": "Conv2d"}], DEFAULT)


def test_pruner_rejects_unsupported_layer(convnet):
    with pytest.raises(PruningConfigError, match="Layer 'bn1' is a BatchNorm2d, which this pruner cannot prune"):
        L1FilterPruner(convnet, [{"sparsity": 0.5, "op_names": ["bn1"]}])
    with pytest.raises(PruningConfigError, match="supports BatchNorm1d, BatchNorm2d, BatchNorm3d"):
        SlimEngine(convnet, [{"sparsity": 0.5, "op_types": ["Conv2d"]}])


def test_layer_without_weight(convnet):
    from slimkit.engines.pruning import LevelEngine

    convnet.act = nn.ReLU()
    with pytest.raises(PruningConfigError, match=r"Layer 'act' \(ReLU\) has no weight tensor to prune"):
        LevelEngine(convnet, [{"sparsity": 0.5, "op_names": ["act"]}])
