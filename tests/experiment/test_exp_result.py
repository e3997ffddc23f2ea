"""print_result writes the #Auto result line the runner parses back."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from slimkit.errors import ConfigError
from slimkit.experiment import parse_result
from slimkit.faces.auptimizer import print_result


def test_print_result_plain_and_with_extras(capsys):
    print_result(0.9711)
    assert capsys.readouterr().out == "#Auto: result=0.9711\n"
    text = print_result(torch.tensor(0.5), params=41234, macs=1.5e6, note="l1")
    out = capsys.readouterr().out
    assert out == text + "\n"
    assert out.splitlines() == ["#Auto: result=0.5", '#Auto: extra={"macs": 1500000.0, "note": "l1", "params": 41234}']


def test_parse_result_takes_the_last_result_and_its_extras(capsys):
    print("epoch 1 loss 0.3")
    print_result(0.25, step=1)
    print("more output")
    print_result(np.float32(0.75))
    parsed = parse_result(capsys.readouterr().out)
    assert parsed.metric == pytest.approx(0.75) and parsed.extra == {}
    assert parse_result("no result here\n") is None
    print_result(float("nan"))
    assert math.isnan(parse_result(capsys.readouterr().out).metric)


def test_exact_round_trip_of_floats(capsys):
    value = 0.1 + 0.2
    print_result(value)
    assert parse_result(capsys.readouterr().out).metric == value


def test_bad_metrics_and_extras():
    with pytest.raises(ConfigError, match=r"print_result needs one number .*got 'high' \(str\)"):
        print_result("high")
    with pytest.raises(ConfigError, match=r"got True \(bool\)"):
        print_result(True)
    with pytest.raises(ConfigError, match=r"got tensor\(\[1\., 2\.\]\)"):
        print_result(torch.tensor([1.0, 2.0]))
    with pytest.raises(ConfigError, match=r"extra values must be JSON-serialisable.*x\.tolist\(\)"):
        print_result(1.0, weights=torch.zeros(2))
    with pytest.raises(ConfigError, match=r"Bad result line '#Auto: result=abc'"):
        parse_result("#Auto: result=abc")
