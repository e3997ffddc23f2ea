"""config_list validation: what is accepted, how layers resolve, and the exact error messages."""

from __future__ import annotations

import pytest
from torch import nn

from slimkit.engines.quantization import (
    BNNEngine,
    DoReFaEngine,
    LsqEngine,
    QATEngine,
    QuantizationConfigError,
    QuantType,
    resolve_quant_config_list,
)
from slimkit.errors import ConfigError


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.act = nn.ReLU()
        self.flat = nn.Flatten()
        self.fc1 = nn.Linear(4 * 6 * 6, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.fc1(self.flat(self.act(self.conv(x)))))


def _resolve(config_list, **kwargs):
    return resolve_quant_config_list(Net(), config_list, ("Conv2d", "Linear"), **kwargs)


def test_default_op_types_and_int_bits():
    resolved = _resolve([{"quant_types": ["weight", "output"], "quant_bits": 8}])
    assert list(resolved) == ["conv", "fc1", "fc2"]
    assert resolved["fc1"]["quant_bits"] == {"weight": 8, "output": 8}
    assert resolved["conv"]["op_type"] == "Conv2d"


def test_later_entries_win_and_exclude_removes():
    resolved = _resolve([
        {"quant_types": ["weight"], "quant_bits": 8, "op_types": ["default"]},
        {"quant_types": ["weight", "input"], "quant_bits": {"weight": 4, "input": 6}, "op_names": ["fc1"]},
        {"exclude": True, "op_names": ["fc2"]},
        {"quant_types": ["output"], "quant_bits": 8, "op_types": ["ReLU"]},
    ])
    assert list(resolved) == ["conv", "act", "fc1"]
    assert resolved["fc1"]["quant_bits"] == {"weight": 4, "input": 6}
    assert resolved["act"]["quant_types"] == ["output"]


def test_quant_type_enum_members_are_accepted():
    resolved = _resolve([{"quant_types": [QuantType.QUANT_WEIGHT], "quant_bits": {QuantType.WEIGHT: 5}}])
    assert resolved["conv"]["quant_types"] == ["weight"] and resolved["conv"]["quant_bits"] == {"weight": 5}


@pytest.mark.parametrize(
    ("config_list", "fragment"),
    [
        ({"quant_types": ["weight"]}, "config_list must be a list of dicts"),
        ([], "config_list is empty"),
        (["weight"], "config_list[0] must be a dict like"),
        ([{"quant_types": ["weight"], "quant_bits": 8, "sparsity": 0.5}], "unknown key 'sparsity'"),
        ([{"quant_type": ["weight"], "quant_bits": 8}], "Did you mean 'quant_types'"),
        ([{"quant_bits": 8}], "config_list[0] has no 'quant_types'"),
        ([{"quant_types": "weight", "quant_bits": 8}], "write e.g. 'quant_types': ['weight']"),
        ([{"quant_types": [], "quant_bits": 8}], "'quant_types'] is empty"),
        ([{"quant_types": ["weights"], "quant_bits": 8}], "Did you mean 'weight'"),
        ([{"quant_types": ["weight", "weight"], "quant_bits": 8}], "lists a type twice"),
        ([{"quant_types": ["weight"]}], "config_list[0] has no 'quant_bits'; add e.g. 'quant_bits': 8"),
        ([{"quant_types": ["weight"], "quant_bits": 8.0}], "must be an integer number of bits in [1, 16], got 8.0"),
        ([{"quant_types": ["weight"], "quant_bits": True}], "got True"),
        ([{"quant_types": ["weight"], "quant_bits": 17}], "= 17 is outside [1, 16]"),
        ([{"quant_types": ["weight"], "quant_bits": {"weight": 8, "output": 8}}],
         "names ['output'], which 'quant_types' ['weight'] does not list"),
        ([{"quant_types": ["weight", "input"], "quant_bits": {"weight": 8}}], "gives no bits for ['input']"),
        ([{"quant_types": ["weight"], "quant_bits": 8, "exclude": "yes"}], "'exclude'] must be True or False"),
        ([{"exclude": True}], "has 'exclude': True but selects nothing"),
        ([{"quant_types": ["weight"], "quant_bits": 8, "op_names": ["fc3"]}], "op_name 'fc3' is not a layer"),
        ([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Conv1d"]}], "selects no layer"),
        ([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Lineer"]}], "Did you mean 'Linear'"),
        ([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["ReLU"]}],
         "Layer 'act' (ReLU) has no floating-point weight to quantize"),
    ],
)
def test_errors_say_what_is_wrong(config_list, fragment):
    with pytest.raises(QuantizationConfigError) as info:
        _resolve(config_list)
    assert fragment in str(info.value)
    assert isinstance(info.value, ConfigError)


def test_unknown_op_name_lists_real_layer_names():
    with pytest.raises(QuantizationConfigError, match=r"Layer names \(closest first\): fc2, fc1, act, flat, conv\."):
        _resolve([{"quant_types": ["weight"], "quant_bits": 8, "op_names": ["fc"]}])


@pytest.mark.parametrize(
    ("cls", "entry", "fragment"),
    [
        (BNNEngine, {"quant_types": ["weight"], "quant_bits": 8}, "= 8 is outside [1, 1]"),
        (LsqEngine, {"quant_types": ["weight"], "quant_bits": 1}, "= 1 is outside [2, 16]"),
        (BNNEngine, {"quant_types": ["input"], "quant_bits": 1}, "Allowed: weight, output"),
        (QATEngine, {"quant_types": ["weight"], "quant_bits": 8, "quant_start_step": -1},
         "quant_start_step of layer 'conv' must be an integer >= 0, got -1"),
        (DoReFaEngine, {"quant_types": ["weight"], "quant_bits": 8, "quant_start_step": 3},
         "unknown key 'quant_start_step'"),
    ],
)
def test_quantizer_specific_limits(cls, entry, fragment):
    with pytest.raises(QuantizationConfigError) as info:
        cls(Net(), [entry])
    assert fragment in str(info.value)


def test_constructor_argument_errors():
    with pytest.raises(QuantizationConfigError, match="model must be a torch.nn.Module, got str"):
        QATEngine("net", [{"quant_types": ["weight"], "quant_bits": 8}])
    with pytest.raises(QuantizationConfigError, match=r"ema_decay must be in \[0, 1\), got 1.5"):
        QATEngine(Net(), [{"quant_types": ["weight"], "quant_bits": 8}], ema_decay=1.5)
    with pytest.raises(QuantizationConfigError, match="optimizer must have a step"):
        QATEngine(Net(), [{"quant_types": ["weight"], "quant_bits": 8}], optimizer=object())
    net = Net()
    QATEngine(net, [{"quant_types": ["weight"], "quant_bits": 8}])
    with pytest.raises(QuantizationConfigError, match="already wrapped by a quantizer"):
        LsqEngine(net, [{"quant_types": ["weight"], "quant_bits": 8}])
