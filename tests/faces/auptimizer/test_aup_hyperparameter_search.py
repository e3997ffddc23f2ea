"""Auptimizer's face in a hyperparameter search: the job config a script loads, print_result per epoch, @aup_args.

In-process checks of what a script sees and prints (the job config the engine writes for a ``parameter_config``
trial, ``BasicConfig().load``, ``print_result`` lines read back as the learning curve and the result), and one
end-to-end search (slow: each job is a fresh Python importing slimkit) with our own 2-D function script written
the way Auptimizer's examples write theirs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import slimkit
from slimkit.errors import ConfigError
from slimkit.experiment import load_experiment, parse_result, run_experiment
from slimkit.experiment.jobs import job_config
from slimkit.experiment.result import StepReader
from slimkit.faces.auptimizer import BasicConfig, aup_args, print_result

# Our own 2-D test function (minimum 0 at x = 1, y = -2), written as Auptimizer's examples write their scripts:
# BasicConfig().load(sys.argv[1]) and print_result. Imports slimkit's face instead of `aup`.
SCRIPT = """import sys
from slimkit.faces.auptimizer import BasicConfig, print_result

config = BasicConfig().load(sys.argv[1])
for epoch in range(1, 4):      # a value per "epoch", as Auptimizer's intermediate-results examples do
    print_result((config.x - 1.0) ** 2 + (config.y + 2.0) ** 2 + 1.0 / epoch - 1.0 / 3)
"""


def _experiment(folder: Path, **fields) -> Path:
    (folder / "func2d.py").write_text(SCRIPT)
    exp = {"name": "func2d", "proposer": "random", "n_samples": 3, "random_seed": 1, "script": "func2d.py",
           "resource": "cpu", "n_parallel": 1, "target": "min",
           "parameter_config": [{"name": "x", "range": [-5, 5], "type": "float"},
                                {"name": "y", "range": [-5, 5], "type": "float"}],
           "resource_args": {"track_intermediate_results": True}, **fields}
    path = folder / "exp_cpu.json"
    path.write_text(json.dumps(exp))
    return path


def test_the_job_config_a_script_loads(tmp_path):
    exp = load_experiment(_experiment(tmp_path, runtime_args={"batch": 32}))
    config = job_config(exp, {"x": 0.5, "y": -1.5}, tmp_path / "trials" / "0007", 7)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(config))
    loaded = BasicConfig().load(path)
    assert (loaded.x, loaded.y, loaded["job_id"], loaded.batch, loaded.save_model) == (0.5, -1.5, 7, 32, False)
    assert "config_list" not in loaded  # a plain hyperparameter search has no compression keys
    assert slimkit.BasicConfig is BasicConfig and slimkit.print_result is print_result


def test_print_result_per_epoch_is_the_learning_curve(capsys):
    for accuracy in (0.5, 0.7, 0.8):
        print_result(accuracy)
    out = capsys.readouterr().out
    reader = StepReader()
    assert [reader.read(line) for line in out.splitlines()] == [None, (1, 0.5), (2, 0.7)]
    assert reader.last() == (3, 0.8)  # the last step: read once the job has ended (no pruning at the last line)
    assert parse_result(out).metric == 0.8  # the last call is the result


def test_explicit_steps_keep_the_final_result_out_of_the_curve(capsys):
    for epoch, accuracy in enumerate((0.5, 0.7), 1):
        print_result(accuracy, step=epoch)
    print_result(0.75, flops=1200)
    out = capsys.readouterr().out
    reader = StepReader()
    assert [s for s in map(reader.read, out.splitlines()) if s] == [(1, 0.5), (2, 0.7)]
    assert reader.last() is None
    result = parse_result(out)
    assert result.metric == 0.75 and result.extra == {"flops": 1200}


def test_aup_args_gets_the_hyperparameters(tmp_path, capsys):
    @aup_args
    def main(x, y, job_id, lr=0.1):
        return (x - 1.0) ** 2 + (y + 2.0) ** 2 + lr

    path = tmp_path / "job.json"
    path.write_text(json.dumps({"x": 1.0, "y": -2.0, "job_id": 0, "lr": 0.25}))
    assert main(str(path)) == 0.25
    assert parse_result(capsys.readouterr().out).metric == 0.25  # returned, so reported, as Auptimizer does
    with pytest.raises(ConfigError, match="needs x but the job config has no such key"):
        main({"y": 0.0, "job_id": 1})


def test_multi_res_labels_list_form(capsys):
    text = print_result([0.3, 2.0, 5.0])
    assert text == "#Auto: result=[0.3, 2.0, 5.0]" and parse_result(capsys.readouterr().out).values == [0.3, 2.0, 5.0]


@pytest.mark.slow  # ~40 s: three jobs, each a fresh Python process importing slimkit
def test_a_2d_function_search_runs_as_auptimizer_writes_it(tmp_path):
    result = run_experiment(_experiment(tmp_path), quiet=True)
    assert result.counts() == {"complete": 3}
    for row in result.rows:
        x, y = row["params"]["x"], row["params"]["y"]
        assert row["result"] == pytest.approx((x - 1) ** 2 + (y + 2) ** 2)
        assert sorted(row["intermediate"]) == [1, 2, 3]
    assert result.best[0]["result"] == min(r["result"] for r in result.rows)
    assert sys.executable in (result.folder / result.rows[0]["trial_dir"] / "log.txt").read_text()
