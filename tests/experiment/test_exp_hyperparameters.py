"""Auptimizer's hyperparameter searches (``parameter_config``) on the experiment engine.

Our own experiment files and scripts with Auptimizer's keys. The scripts are plain Python speaking the runner's
``#Auto:`` protocol (what ``print_result`` writes), so each job starts in a fraction of a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from slimkit.errors import ConfigError
from slimkit.experiment import load_experiment, report_experiment, run_experiment
from slimkit.experiment.study import make_pruner, make_sampler

# A bowl in two variables with its minimum 0 at (1, -2); "scale" (runtime_args) stretches it.
BOWL = """import json, sys
c = json.load(open(sys.argv[1]))
print("job", c["job_id"], "x", c["x"], "y", c["y"], flush=True)
print("#Auto: result=%r" % (c.get("scale", 1.0) * ((c["x"] - 1.0) ** 2 + (c["y"] + 2.0) ** 2)))
"""

# Crashes (to stderr) for x > 2; for 0 < x <= 2 it crashes on a trial's first attempt only (a flaky job).
FLAKY = """import json, os, sys
c = json.load(open(sys.argv[1]))
if c["x"] > 2:
    sys.exit("boom: x=%s is out of the stable range" % c["x"])
marker = "attempted_%d" % c["job_id"]
if c["x"] > 0 and not os.path.exists(marker):
    open(marker, "w").close()
    raise RuntimeError("flaky first attempt")
print("#Auto: result=%r" % (c["x"] ** 2))
"""

# Training hyperparameters and a compression setting together: best at lr = 0.01, sparsity = 0.5.
JOINT = """import json, math, sys
c = json.load(open(sys.argv[1]))
s = c["config_list"][0]["sparsity"]
print("#Auto: result=%r" % (-(math.log10(c["lr"]) + 2) ** 2 - (s - 0.5) ** 2 - 0.01 * c["epochs"]))
"""

XY = [{"name": "x", "range": [-5, 5], "type": "float"}, {"name": "y", "range": [-5, 5], "type": "float"}]


def _write(folder: Path, script: str, **fields) -> Path:
    (folder / "job.py").write_text(script)
    exp = {"name": "hpo", "script": "job.py", "resource": "cpu", "target": "min", "proposer": "random",
           "n_samples": 4, "random_seed": 3, "parameter_config": XY, **fields}
    path = folder / "exp.json"
    path.write_text(json.dumps(exp))
    return path


def test_2d_function_search_finds_the_minimum(tmp_path):
    path = _write(tmp_path, BOWL, proposer="tpe", n_samples=16, n_parallel=1)
    result = run_experiment(path, quiet=True)  # parameter_config: a search without --automatic
    assert len(result.rows) == 16 and result.counts() == {"complete": 16}
    (best,) = result.best
    assert best["result"] == min(r["result"] for r in result.rows)
    assert best["result"] < 1.0 and abs(best["params"]["x"] - 1) < 1 and abs(best["params"]["y"] + 2) < 1
    job = json.loads((result.folder / best["trial_dir"] / "job.json").read_text())
    assert job["x"] == best["params"]["x"] and job["y"] == best["params"]["y"] and job["job_id"] == best["number"]


def test_slimkit_run_takes_an_auptimizer_file_as_written(tmp_path, capsys):
    from slimkit.cli import main

    path = _write(tmp_path, BOWL, n_samples=2)
    assert main(["run", str(path)]) == 0  # no --automatic: parameter_config is a search
    err = capsys.readouterr()
    assert "automatic search, 2 trial(s), proposer random" in err.err and "2 complete" in err.out


def test_parallel_workers_and_runtime_args(tmp_path):
    path = _write(tmp_path, BOWL, n_samples=6, n_parallel=2, runtime_args={"scale": 10.0})
    result = run_experiment(path, quiet=True)
    assert len(result.rows) == 6 and result.counts() == {"complete": 6}
    for row in result.rows:
        x, y = row["params"]["x"], row["params"]["y"]
        assert row["result"] == pytest.approx(10.0 * ((x - 1) ** 2 + (y + 2) ** 2))


def test_every_parameter_type(tmp_path):
    config = [{"name": "lr", "range": [1e-4, 1e-1], "type": "float", "log": True},
              {"name": "epochs", "range": [2, 8], "type": "int", "interval": 2},
              {"name": "width", "range": [20, 50], "type": "int", "n": 3},
              {"name": "x", "range": [-1, 1], "type": "float", "n": 5, "size": 1},
              {"name": "opt", "range": ["sgd", "adam"], "type": "choice"}]
    exp = load_experiment(_write(tmp_path, BOWL, parameter_config=config))
    grids = {p.name: p.grid() for p in exp.params}
    assert grids["epochs"] == [2, 4, 6, 8] and grids["width"] == [20, 35, 50]  # Auptimizer's n for ints
    assert grids["x"] == [-1.0, -0.5, 0.0, 0.5, 1.0] and grids["opt"] == ["sgd", "adam"]
    assert exp.params[0].log and exp.hyperparameters == ["lr", "epochs", "width", "x", "opt"]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        trial = study.ask()
        values = {p.name: p.suggest(trial) for p in exp.params}
        assert 1e-4 <= values["lr"] <= 1e-1 and values["epochs"] in (2, 4, 6, 8) and values["width"] in (20, 35, 50)
        study.tell(trial, 0.0)


def test_sequence_steps_a_bare_float_range_by_one(tmp_path):
    exp = load_experiment(_write(tmp_path, BOWL, proposer="sequence"))  # Auptimizer's default interval
    assert [p.grid() for p in exp.params] == [[float(v) for v in range(-5, 6)]] * 2


def test_sequence_runs_the_whole_grid(tmp_path):
    grid = [{"name": "x", "range": [0, 1], "type": "int"}, {"name": "y", "range": [-3, -2], "type": "float",
                                                           "interval": 1.0}]
    result = run_experiment(_write(tmp_path, BOWL, proposer="sequence", n_samples=50, parameter_config=grid),
                            quiet=True)
    assert sorted((r["params"]["x"], r["params"]["y"]) for r in result.rows) == [
        (x, y) for x in (0, 1) for y in (-3.0, -2.0)]  # 4 points, not 50
    assert result.best[0]["params"] == {"x": 1, "y": -2.0} and result.best[0]["result"] == 0.0


def test_failed_jobs_are_recorded_retried_and_not_results(tmp_path, capsys):
    path = _write(tmp_path, FLAKY, n_samples=6, parameter_config=[{"name": "x", "range": [-4, 4], "type": "float"}],
                  job_failure={"ignore_fail": True, "job_retries": 2})
    result = run_experiment(path, quiet=True)
    rows = {r["number"]: r for r in result.rows}
    assert len(rows) == 6
    for row in rows.values():
        x = row["params"]["x"]
        if x > 2:
            assert row["state"] == "failed" and row["attempts"] == 3 and row["result"] is None
            assert "boom: x=" in row["log_tail"] and "status 1" in row["reason"]
        else:
            assert row["state"] == "complete" and row["attempts"] == (2 if x > 0 else 1)
    assert any(r["state"] == "failed" for r in rows.values())  # seed 3 draws x > 2
    assert any(r["attempts"] == 2 for r in rows.values())  # and 0 < x <= 2: retried once, then complete
    complete = [r for r in rows.values() if r["state"] == "complete"]
    assert result.best[0]["result"] == min(r["result"] for r in complete)
    report_experiment(result.folder)
    out = capsys.readouterr().out
    assert "failed after 3 attempts" in out and "boom: x=" in out


def test_a_failure_stops_the_study_without_ignore_fail(tmp_path):
    path = _write(tmp_path, FLAKY, n_samples=8, parameter_config=[{"name": "x", "range": [3, 4], "type": "float"}],
                  job_failure={"ignore_fail": False, "job_retries": 1})
    result = run_experiment(path, quiet=True)
    assert [(r["state"], r["attempts"]) for r in result.rows] == [("failed", 2)]


def test_a_script_whose_framework_is_missing_fails_naming_it(tmp_path):
    script = "import json, sys\nimport keras_is_not_installed_here\n"
    result = run_experiment(_write(tmp_path, script, n_samples=1), quiet=True)
    (row,) = result.rows
    assert row["state"] == "failed" and "ModuleNotFoundError" in row["log_tail"]
    assert row["reason"] == ("the script exited with status 1: it imports 'keras_is_not_installed_here', which is not "
                             "installed here (the script needs it; slimkit runs any script, whatever it imports)")


def test_joint_search_of_training_and_compression_settings(tmp_path):
    compression = {"framework": "torch", "type": "pruning", "compressor": "fpgm",
                   "config_list": [{"sparsity": {"range": [0.1, 0.9], "type": "float"}, "op_types": ["Conv2d"]}]}
    path = _write(tmp_path, JOINT, target="max", proposer="tpe", n_samples=10, compression=compression,
                  parameter_config=[{"name": "lr", "range": [1e-4, 1.0], "type": "float", "log": True},
                                    {"name": "epochs", "range": [1, 3], "type": "int"}])
    exp = load_experiment(path)
    assert [p.name for p in exp.params] == ["lr", "epochs", "config_list[0].sparsity"]
    result = run_experiment(path, quiet=True)
    assert len(result.rows) == 10 and result.counts() == {"complete": 10}
    (best,) = result.best
    job = json.loads((result.folder / best["trial_dir"] / "job.json").read_text())
    assert job["compressor"] == "fpgm" and job["config_list"][0]["op_types"] == ["Conv2d"]
    assert job["lr"] == best["params"]["lr"] and job["config_list"][0]["sparsity"] == best["params"][
        "config_list[0].sparsity"]
    assert best["result"] > -0.3  # near lr 0.01, sparsity 0.5 (the maximum is -0.01)


def test_multi_res_labels_name_the_extra_values(tmp_path):
    script = """import json, sys
c = json.load(open(sys.argv[1]))
print("#Auto: result=[%r, %r, %r]" % ((c["x"] - 1.0) ** 2 + (c["y"] + 2.0) ** 2, abs(c["x"]), abs(c["y"])))
"""
    result = run_experiment(_write(tmp_path, script, n_samples=2, resource_args={"multi_res_labels": ["ax", "ay"]}),
                            quiet=True)
    for row in result.rows:
        assert row["measured"] == {"ax": abs(row["params"]["x"]), "ay": abs(row["params"]["y"])}
        assert row["result"] == pytest.approx((row["params"]["x"] - 1) ** 2 + (row["params"]["y"] + 2) ** 2)


@pytest.mark.parametrize(("fields", "sampler", "pruner"), [
    ({"proposer": "random"}, optuna.samplers.RandomSampler, optuna.pruners.NopPruner),
    ({"proposer": "sequence", "parameter_config": [{"name": "x", "range": [0, 1], "type": "float", "n": 3}]},
     optuna.samplers.GridSampler, optuna.pruners.NopPruner),
    ({"proposer": "hyperopt", "engine": "tpe"}, optuna.samplers.TPESampler, optuna.pruners.NopPruner),
    ({"proposer": "hyperopt", "engine": "random"}, optuna.samplers.RandomSampler, optuna.pruners.NopPruner),
    ({"proposer": "spearmint", "engine": "GPEIChooser"}, optuna.samplers.GPSampler, optuna.pruners.NopPruner),
    ({"proposer": "hyperband", "max_iter": 3, "engine": "random"}, optuna.samplers.RandomSampler,
     optuna.pruners.HyperbandPruner),
    ({"proposer": "BOHB", "min_points_in_model": "", "min_budget": 1, "max_budget": 9, "n_iterations": 3},
     optuna.samplers.TPESampler, optuna.pruners.HyperbandPruner),
])
def test_auptimizer_proposers_map_to_optuna(tmp_path, fields, sampler, pruner):
    exp = load_experiment(_write(tmp_path, BOWL, **fields))
    assert type(make_sampler(exp)) is sampler or isinstance(make_sampler(exp), sampler)
    assert isinstance(make_pruner(exp), pruner)


@pytest.mark.parametrize(("fields", "message"), [
    ({"parameter_config": [{"name": "x", "range": [0, 1], "type": "float", "step": 2}]},
     "parameter_config[0]: 'step' is not a field. Valid fields (closest first): size"),
    ({"parameter_config": [{"name": "1x", "range": [0, 1], "type": "float"}]}, "parameter_config[0].name"),
    ({"parameter_config": XY + XY[:1]}, "parameter_config[2].name: 'x' is given twice"),
    ({"parameter_config": [{"name": "job_id", "range": [0, 1], "type": "float"}]}, "runner writes"),
    ({"parameter_config": [{"name": "x", "range": [0, 1], "type": "float", "size": 2}]}, "parameter_config[0].size"),
    ({"parameter_config": [{"name": "x", "range": [0.5, 2], "type": "int"}]}, "parameter_config[0].range"),
    ({"parameter_config": [{"name": "x", "type": "float"}]}, "parameter_config[0].range: missing"),
    ({"parameter_config": []}, "parameter_config: a non-empty list"),
    ({"parameter_config": None, "proposer": "random"}, "parameter_config: a non-empty list"),
    ({"runtime_args": {"y": 2}}, "runtime_args.y: also a parameter_config name"),
    ({"proposer": "eas"}, "closest working proposer is 'tpe'"),
    ({"proposer": "passive"}, "closest working proposer is 'sequence'"),
    ({"resource": "aws", "resource_args": {"shutdown": "yes"}}, "resource_args.shutdown: true or false; got 'yes'"),
    ({"resource_args": {"connection_retry": 2}}, "resource_args.connection_retry: belongs to the 'aws' resource"),
    ({"resource_args": {"max_retries": -1}}, "resource_args.max_retries: a whole number >= 0; got -1"),
    ({"resource_args": {"async_run": "yes"}}, "resource_args.async_run: true or false"),
    ({"runtime_args": {"prescript": ["a", "b"]}}, "runtime_args.prescript: shell commands as one string"),
    ({"runtime_args": {"env": {"A=B": "1"}}}, "runtime_args.env: environment variables as an object"),
    ({"proposer": "hyperopt", "engine": "anneal"}, "engine: 'anneal' is not allowed"),
    ({"proposer": "sequence", "compression": {"framework": "torch", "type": "pruning", "compressor": "fpgm",
                                              "config_list": [{"sparsity": {"range": [0.1, 0.9], "type": "float"}}]}},
     "compression.config_list[0].sparsity: the 'sequence' proposer needs a grid"),
    ({"resource_args": {"multi_res_labels": "flops"}}, "resource_args.multi_res_labels"),
])
def test_bad_fields_are_named(tmp_path, fields, message):
    with pytest.raises(ConfigError) as info:
        load_experiment(_write(tmp_path, BOWL, **fields))
    assert message in str(info.value)


def test_gpu_resource_needs_a_visible_gpu(tmp_path):
    import torch

    path = _write(tmp_path, BOWL, resource="gpu")
    if torch.cuda.is_available():
        assert load_experiment(path).resource == "gpu"
    else:
        with pytest.raises(ConfigError, match="resource: 'gpu' but torch sees no CUDA device"):
            load_experiment(path)


def test_a_script_needs_something_to_search(tmp_path):
    path = _write(tmp_path, BOWL)
    raw = json.loads(path.read_text())
    del raw["parameter_config"]
    with pytest.raises(ConfigError, match="parameter_config / compression: missing"):
        load_experiment(raw | {"workingdir": str(tmp_path)})
    with pytest.raises(ConfigError, match="parameter_config: needs a 'script'"):
        load_experiment({"model": "mlp", "parameter_config": XY})
