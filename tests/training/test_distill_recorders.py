"""Recorders capture by name and never leave a hook or a patch behind (also after an error)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.errors import ConfigError
from slimkit.training.distill import (
    FunctionOutputsRecorder,
    MethodOutputsRecorder,
    ModuleInputsRecorder,
    ModuleOutputsRecorder,
    RecorderManager,
)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
        self.head = nn.Linear(6, 3)

    def helper(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.gelu(self.helper(self.body(x))))


def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_module_outputs_and_inputs_by_name():
    torch.manual_seed(0)
    net, x = Net(), torch.randn(5, 4)
    manager = RecorderManager({"out": dict(type="ModuleOutputs", source="body.0"),
                               "inp": dict(type="ModuleInputs", source="head"),
                               "whole": ModuleOutputsRecorder("")})
    manager.initialize(net)
    with manager:
        y = net(x)
    torch.testing.assert_close(manager.get("out"), net.body[0](x))
    torch.testing.assert_close(manager.get("inp", data_idx=0), F.gelu(2 * net.body(x)))
    torch.testing.assert_close(manager.get("whole"), y)
    assert _hooks(net) == 0


def test_every_call_is_recorded_and_entering_clears():
    net = Net()
    rec = ModuleOutputsRecorder("head")
    rec.initialize(net)
    with rec:
        net(torch.randn(2, 4))
        net(torch.randn(3, 4))
    assert [t.shape[0] for t in rec.data] == [2, 3]
    assert rec.get_record_data(record_idx=1).shape == (3, 3)
    with rec:
        pass
    assert rec.data == []
    with pytest.raises(ConfigError, match="recorded nothing"):
        rec.get_record_data()


def test_method_and_function_outputs_are_patched_only_inside_the_block():
    net, x = Net(), torch.randn(2, 4)
    method = MethodOutputsRecorder(f"{__name__}.Net.helper")
    function = FunctionOutputsRecorder("torch.nn.functional.gelu")
    original_gelu, original_helper = F.gelu, Net.helper
    with method, function:
        net(x)
        assert F.gelu is not original_gelu
    assert F.gelu is original_gelu and Net.helper is original_helper
    torch.testing.assert_close(method.get_record_data(), 2 * net.body(x))
    torch.testing.assert_close(function.get_record_data(), F.gelu(2 * net.body(x)))


def test_no_hook_or_patch_survives_an_error():
    net = Net()
    manager = RecorderManager({"a": dict(type="ModuleOutputs", source="head"),
                               "f": dict(type="FunctionOutputs", source="torch.nn.functional.gelu")})
    manager.initialize(net)
    original = F.gelu
    with pytest.raises(RuntimeError), manager:
        net(torch.randn(2, 5))  # wrong width: the forward fails inside the block
    assert _hooks(net) == 0 and F.gelu is original


def test_unknown_sources_list_the_closest_names():
    net = Net()
    with pytest.raises(ConfigError, match=r"no module 'body.1x'.*Did you mean 'body.1'"):
        ModuleOutputsRecorder("body.1x").initialize(net)
    with pytest.raises(ConfigError, match=r"'torch.nn.functional.gelo' does not exist.*'gelu'"):
        FunctionOutputsRecorder("torch.nn.functional.gelo")
    with pytest.raises(ConfigError, match="unknown type 'ModuleOutput'.*'ModuleOutputs'"):
        RecorderManager({"x": dict(type="ModuleOutput", source="head")})
    with pytest.raises(ConfigError, match="No recorder named 'ot'.*'out'"):
        RecorderManager({"out": ModuleInputsRecorder("head")}).get("ot")
