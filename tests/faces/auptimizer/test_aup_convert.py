"""Auptimizer's auto-converted experiment (``experiment_auto.json``): the job script generated from a function.

Our own files: a module defining Booth's function and an experiment naming a script that does not exist until
``python -m slimkit.faces.auptimizer.convert`` writes it, as ``aup.convert`` does for Auptimizer's example.
"""

from __future__ import annotations

import json
import os
import runpy
from pathlib import Path

import pytest

import slimkit
from slimkit.errors import ConfigError
from slimkit.experiment import load_experiment, run_experiment
from slimkit.faces.auptimizer.convert import convert_script, main

ORIGIN = '''"""Booth's function, minimum 0 at (1, 3)."""


def booth(x, y, scale=1.0):
    return scale * ((x + 2 * y - 7) ** 2 + (2 * x + y - 5) ** 2)
'''
EXPERIMENT = {"name": "booth auto", "proposer": "random", "n_samples": 4, "random_seed": 3, "script": "booth_auto.py",
              "resource": "cpu", "n_parallel": 1, "target": "min",
              "parameter_config": [{"name": "x", "range": [-5, 5], "type": "float"},
                                   {"name": "y", "range": [-5, 5], "type": "float"}]}


def booth(x: float, y: float) -> float:
    return (x + 2 * y - 7) ** 2 + (2 * x + y - 5) ** 2


@pytest.fixture
def folder(tmp_path) -> Path:
    (tmp_path / "booth.py").write_text(ORIGIN)
    (tmp_path / "experiment_auto.json").write_text(json.dumps(EXPERIMENT))
    return tmp_path


def test_the_generated_script_calls_the_function_with_the_job_parameters(folder, capsys):
    with pytest.raises(ConfigError, match="script: 'booth_auto.py' is not a file"):
        load_experiment(folder / "experiment_auto.json", automatic=True)  # before conversion, as upstream
    assert main([str(folder / "booth.py"), str(folder / "experiment_auto.json"), "booth"]) == 0
    out = folder / "booth_auto.py"
    assert "wrote" in capsys.readouterr().err and os.access(out, os.X_OK)
    text = out.read_text()
    assert text.startswith("#!/usr/bin/env python3\n" + ORIGIN.rstrip("\n"))  # the original source, unchanged
    assert "_print_result(booth(x=config['x'], y=config['y']))" in text
    job = runpy.run_path(str(out), run_name="job")  # the module as a job imports it, minus the __main__ block
    job["_slimkit_job"](slimkit.BasicConfig({"x": 1.5, "y": -2.0}))
    assert capsys.readouterr().out.strip() == f"#Auto: result={booth(1.5, -2.0)!r}"
    assert load_experiment(folder / "experiment_auto.json", automatic=True).script == out.resolve()


@pytest.mark.parametrize(("edit", "args", "message"), [
    (None, ("rosenbrock",), "no top-level function 'rosenbrock'; functions defined there (closest first): booth"),
    ("def booth(x, scale=1.0):\n    return x\n", ("booth",), "booth() does not accept 'y'"),
    (ORIGIN + 'if __name__ == "__main__":\n    print(booth(1, 3))\n', ("booth",), "line 6 already has an `if __name__"),
    ("def booth(x, y:\n", ("booth",), "not valid Python"),
    (None, ("booth", "booth.py"), "would overwrite the script being converted"),
])
def test_bad_conversions_are_refused_and_write_nothing(folder, edit, args, message):
    if edit is not None:
        (folder / "booth.py").write_text(edit)
    output = folder / args[1] if len(args) > 1 else None
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        convert_script(folder / "booth.py", folder / "experiment_auto.json", args[0], output)
    assert not (folder / "booth_auto.py").exists()
    assert main([str(folder / "booth.py"), str(folder / "nope.json"), "booth"]) == 2


def test_keyword_catch_all_and_parameter_names(folder):
    (folder / "booth.py").write_text("def booth(**kwargs):\n    return kwargs['x'] + kwargs['y']\n")
    assert convert_script(folder / "booth.py", folder / "experiment_auto.json", "booth").name == "booth_auto.py"
    (folder / "bad.json").write_text(json.dumps({**EXPERIMENT, "parameter_config": [{"name": "1x"}]}))
    with pytest.raises(ConfigError, match=r"parameter_config\[0\]\.name: a Python identifier"):
        convert_script(folder / "booth.py", folder / "bad.json", "booth")


@pytest.mark.slow  # ~4 jobs that import slimkit (seconds each on a loaded host)
def test_the_converted_experiment_runs_and_reports_its_best(folder):
    convert_script(folder / "booth.py", folder / "experiment_auto.json", "booth")
    result = run_experiment(folder / "experiment_auto.json", automatic=True, quiet=True)
    assert [r["state"] for r in result.rows] == ["complete"] * 4
    for row in result.rows:
        assert row["result"] == pytest.approx(booth(row["params"]["x"], row["params"]["y"]))
    assert result.best[0]["result"] == min(r["result"] for r in result.rows)
