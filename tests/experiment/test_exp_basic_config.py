"""BasicConfig (the job config a script reads) and print_result's intermediate values."""

from __future__ import annotations

import json

import pytest

import slimkit
from slimkit.errors import ConfigError
from slimkit.experiment.result import parse_intermediate, parse_result


def test_basic_config_is_a_dict_with_attribute_access(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"compressor": "l1_filter", "config_list": [{"sparsity": 0.3}], "save_model": False}))
    config = slimkit.BasicConfig().load(path)
    assert isinstance(config, dict) and config.compressor == "l1_filter" and config["config_list"][0]["sparsity"] == 0.3
    config.folder_name = "out"
    assert config["folder_name"] == "out"
    with pytest.raises(AttributeError, match=r"The config has no 'missing'; its keys: compressor, config_list"):
        _ = config.missing
    saved = config.save(tmp_path / "again.json")
    assert json.loads(saved.read_text()) == dict(config)
    with pytest.raises(ConfigError, match=r"config file '.*nope\.json' does not exist"):
        slimkit.BasicConfig().load(tmp_path / "nope.json")


def test_intermediate_results_are_separate_lines(capsys):
    text = slimkit.print_result(0.5, step=2)
    slimkit.print_result(0.75)
    out = capsys.readouterr().out
    assert text == '#Auto: intermediate={"step": 2, "value": 0.5}'
    assert parse_intermediate(out.splitlines()[0]) == (2, 0.5) and parse_intermediate(out.splitlines()[1]) is None
    assert parse_result(out).metric == 0.75  # the final result is the last call without step
    with pytest.raises(ConfigError, match=r"step must be a whole number >= 0"):
        slimkit.print_result(0.5, step=-1)
