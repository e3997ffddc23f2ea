"""slimkit.core.devices: device specs as torch reads them, nested inputs moved whole, accumulator dtypes."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch

from slimkit import SmashConfig
from slimkit.core.devices import accumulator_dtype, is_available, move_inputs, parse_device, resolve_device
from slimkit.errors import ConfigError


def test_auto_and_none_pick_cuda_only_when_present():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto") == resolve_device(None) == expected
    assert parse_device("auto") == torch.device(expected)


@pytest.mark.parametrize(("spec", "stored"), [("cpu", "cpu"), ("cuda", "cuda"), ("cuda:1", "cuda:1"), ("mps", "mps"),
                                              ("xpu:2", "xpu:2"), (torch.device("cuda", 3), "cuda:3")])
def test_every_device_torch_names_is_accepted_as_written(spec, stored):
    assert resolve_device(spec) == stored
    assert SmashConfig(device=spec).device == stored  # the config stores it; smash checks availability


@pytest.mark.parametrize(("spec", "said"), [("tpu", "Unknown device 'tpu'"), ("gpu", "Unknown device 'gpu'"),
                                            ("cuda:x", "Invalid device string: 'cuda:x'"), ("", "Unknown device ''"),
                                            (3, "got int 3")])
def test_a_device_torch_refuses_is_a_config_error_naming_it(spec, said):
    with pytest.raises(ConfigError, match=said) as info:
        SmashConfig(device=spec)
    assert "'cuda:N'" in str(info.value)


def test_move_inputs_reaches_nested_tuples_dicts_and_named_tuples():
    pair = namedtuple("pair", "cos sin")
    ids = torch.arange(6).view(2, 3)
    cos, sin = torch.ones(3, 4, dtype=torch.float64), torch.zeros(3, 4, dtype=torch.float64)
    call = {"position_embeddings": (cos, sin), "rotary": pair(cos, sin), "masks": [ids > 2, None],
            "input_ids": ids, "use_cache": False}
    moved = move_inputs(call, "meta", torch.float16)
    assert moved["position_embeddings"][0].device.type == "meta" and isinstance(moved["position_embeddings"], tuple)
    assert type(moved["rotary"]) is pair and moved["rotary"].sin.dtype == torch.float16
    assert moved["masks"][0].device.type == "meta" and moved["masks"][0].dtype == torch.bool
    assert moved["masks"][1] is None
    assert moved["input_ids"].dtype == torch.long and moved["use_cache"] is False  # only floating tensors are cast
    same = move_inputs(call, "cpu")
    assert same["input_ids"] is ids and same["position_embeddings"][1] is sin  # already there: no copy
    assert move_inputs(ids) is ids and move_inputs("text", "meta") == "text"


def test_accumulators_are_float64_except_where_the_device_has_none():
    assert accumulator_dtype("cpu") == accumulator_dtype(torch.device("cuda", 1)) == torch.float64
    assert accumulator_dtype("mps") == torch.float32


def test_availability_is_asked_of_torch_and_never_raises():
    assert is_available("cpu") and is_available("meta")
    assert is_available("cuda:0") == torch.cuda.is_available()
    assert not is_available("hpu") and not is_available("no-such-device") and not is_available("")


def test_a_saved_device_absent_here_loads_as_the_cpu(tmp_path):
    cfg = SmashConfig(["int8_dynamic"], device="xpu:1")
    cfg.save_to_json(tmp_path)
    assert SmashConfig.from_json(tmp_path).device == ("xpu:1" if is_available("xpu:1") else "cpu")
