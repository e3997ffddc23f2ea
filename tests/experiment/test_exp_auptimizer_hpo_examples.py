"""Each kind of experiment file in Auptimizer's ``Examples/`` (besides compression) as its keys are written.

Our own files with Auptimizer's keys (its example files are GPL-3.0: none is copied), one per kind the examples
hold: 2-D function searches on every resource (cpu, node, passive, aws), several results per job
(``multi_res_labels``), early stopping under each proposer, job-failure control, and Keras/TensorFlow scripts.
Each validates as written (paths aside); a TensorFlow script fails at its own import, naming the library; the
remote resources say what they need to run (a shared study and ``slimkit worker``).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from slimkit.errors import ConfigError
from slimkit.experiment import load_experiment, run_experiment

XY = [{"name": "x", "range": [-4, 4], "type": "float"}, {"name": "y", "range": [-4, 4], "type": "float"}]
NODE_ARGS = {"prescript": "export OMP_NUM_THREADS=1", "postscript": "echo finished", "overwrite": True}
KINDS = {
    "cpu_sequence": {"proposer": "sequence", "n_samples": 9, "resource": "cpu", "target": "min", "random_seed": 2,
                     "parameter_config": [{"name": "x", "range": [-4, 4], "type": "float", "interval": 4},
                                          {"name": "y", "range": [-4, 4], "type": "float", "n": 3}]},
    "node": {"proposer": "random", "n_samples": 6, "resource": "node", "n_parallel": 3, "target": "min",
             "runtime_args": NODE_ARGS, "resource_args": {"max_retries": 4, "reconn_wait_time": 2},
             "parameter_config": XY},
    "node_async": {"proposer": "random", "n_samples": 6, "resource": "node", "target": "min", "runtime_args": NODE_ARGS,
                   "resource_args": {"max_retries": 1, "reconn_wait_time": 5, "async_run": True,
                                     "async_reconnect": 2, "async_timeout": 50}, "parameter_config": XY},
    "passive": {"proposer": "random", "n_samples": 3, "resource": "passive", "target": "min", "parameter_config": XY},
    "aws": {"proposer": "random", "n_samples": 5, "resource": "aws", "target": "min",
            "runtime_args": {"prescript": "cd ~", "postscript": "echo done"},
            "resource_args": {"shutdown": False, "connection_retry": 2}, "parameter_config": XY},
    "multi_res": {"proposer": "random", "n_samples": 4, "resource": "cpu", "target": "min",
                  "resource_args": {"multi_res_labels": ["x_part", "y_part"]}, "parameter_config": XY},
    "early_stop_bohb": {"proposer": "bohb", "resource": "cpu", "n_parallel": 2, "target": "min", "n_iterations": 3,
                        "eta": 3, "min_budget": 1, "max_budget": 9, "num_samples": 16,
                        "resource_args": {"early_stop": {"aup_policy": "bandit", "aup_policy_steps": 1,
                                                         "bandit_factor": 0.6}},
                        "parameter_config": [{"name": "x", "range": [-2.0, 30.0], "type": "float"}]},
    "early_stop_spearmint": {"proposer": "spearmint", "resource": "cpu", "n_samples": 12, "target": "min",
                             "engine": "GPEIOptChooser",
                             "resource_args": {"early_stop": {"aup_policy": "truncation", "aup_policy_steps": 2,
                                                              "truncation_percentage": 0.4}},
                             "parameter_config": [{"name": "x", "range": [-2.0, 30.0], "type": "float"}]},
    "intermediate": {"proposer": "random", "resource": "cpu", "n_samples": 5, "target": "min",
                     "resource_args": {"track_intermediate_results": True},
                     "parameter_config": [{"name": "x", "range": [-2.0, 30.0], "type": "float"}]},
    "job_failure": {"proposer": "sequence", "resource": "cpu", "n_samples": 4, "target": "min",
                    "job_failure": {"ignore_fail": True, "job_retries": 2},
                    "parameter_config": [{"name": "x", "range": [0, 3], "type": "int"}]},
    "defaults": {"target": "min", "parameter_config": XY},  # no proposer, n_samples or resource
}


def _write(folder: Path, fields: dict, script: str = "import sys\n") -> Path:
    (folder / "job.py").write_text(script)
    path = folder / "exp.json"
    path.write_text(json.dumps({"name": "./examples/exp.json", "script": "job.py", **fields}))
    return path


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_of_example_file_validates_as_written(tmp_path, kind):
    exp = load_experiment(_write(tmp_path, KINDS[kind]))
    assert exp.hyperparameters and exp.script is not None
    assert exp.resource == KINDS[kind].get("resource", "cpu")
    if kind.startswith("node"):
        assert exp.resources.connect_retries == KINDS[kind]["resource_args"]["max_retries"]
        assert exp.resources.prescript == NODE_ARGS["prescript"] and exp.runtime_args["overwrite"] is True
    if kind == "node_async":
        assert (exp.job_timeout, exp.resources.heartbeat) == (50.0, 2)
    if kind == "aws":
        assert exp.resources.shared and exp.resources.connect_retries == 2
    if kind == "defaults":
        assert (exp.proposer, exp.n_samples, exp.resource, exp.n_parallel) == ("tpe", 1, "cpu", 1)
    if kind == "early_stop_bohb":
        assert exp.early_stop_policy["aup_policy"] == "bandit" and exp.track_intermediate_results
    if kind == "multi_res":
        assert exp.multi_res_labels == ["x_part", "y_part"]


@pytest.mark.parametrize("kind", ["node", "passive", "aws"])
def test_a_remote_resource_says_what_it_needs(tmp_path, kind):
    path = _write(tmp_path, KINDS[kind])
    with pytest.raises(ConfigError, match=rf"resource: '{kind}' .*--storage postgresql://.*`slimkit worker"):
        run_experiment(path, quiet=True)


KERAS_SCRIPT = """import sys
import tensorflow as tf
from tensorflow import keras
print(tf.__version__, keras)
"""


NO_TENSORFLOW = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is not None,
                                   reason="checks the failure where TensorFlow is absent (it is installed here)")


@NO_TENSORFLOW
def test_a_keras_early_stopping_example_fails_at_the_scripts_import_naming_tensorflow(tmp_path):
    fields = {"proposer": "random", "resource": "cpu", "n_samples": 1, "target": "max",
              "resource_args": {"early_stop": {"aup_policy": "curve_fitting", "aup_policy_steps": 10,
                                               "curve_fitting_max_iters": 100, "curve_fitting_threshold": 0.9,
                                               "curve_fitting_timeout": 30}, "save_model": True},
              "parameter_config": [{"name": "dropout", "range": [0.0, 0.5], "type": "float"},
                                   {"name": "conv1", "range": [8, 32], "type": "int"}]}
    result = run_experiment(_write(tmp_path, fields, KERAS_SCRIPT), quiet=True)
    (row,) = result.rows
    assert row["state"] == "failed"
    assert "it imports 'tensorflow', which is not installed here" in row["reason"]


@NO_TENSORFLOW
def test_a_tensorflow_compression_example_validates_and_fails_at_the_import(tmp_path):
    fields = {"resource": "cpu", "compression": {"framework": "tensorflow", "type": "pruning", "compressor": "level",
                                                 "config_list": [{"sparsity": 0.5, "op_types": ["default"]}]}}
    exp = load_experiment(_write(tmp_path, fields, KERAS_SCRIPT))
    assert exp.compression["framework"] == "tensorflow"  # handed to the script, whose create_compressor refuses it
    result = run_experiment(exp.path, quiet=True)
    (row,) = result.rows
    assert row["state"] == "failed" and "it imports 'tensorflow'" in row["reason"]
    job = json.loads((result.folder / row["trial_dir"] / "job.json").read_text())
    assert job["compression_framework"] == "tensorflow" and job["config_list"][0]["sparsity"] == 0.5
    with pytest.raises(ConfigError, match="compression.framework: 'mxnet' is not supported"):
        load_experiment(_write(tmp_path, {**fields, "compression": {**fields["compression"], "framework": "mxnet"}}))


HIMMELBLAU = """import json, sys
c = json.load(open(sys.argv[1]))
print("#Auto: result=%r" % ((c["x"] ** 2 + c["y"] - 11) ** 2 + (c["x"] + c["y"] ** 2 - 7) ** 2))
"""


@pytest.mark.parametrize(("resource", "n_samples", "where"), [
    pytest.param("aws", 3, "each machine runs `slimkit worker`", marks=pytest.mark.slow),  # ~3 s: a SQLite study
    ("cpu", 1, "the jobs run on this machine"),
])
def test_shutdown_true_runs_as_written_with_one_warning_line(tmp_path, capsys, resource, n_samples, where):
    fields = {"proposer": "random", "n_samples": n_samples, "random_seed": 1, "resource": resource, "target": "min",
              "resource_args": {"shutdown": True, **({"connection_retry": 2} if resource == "aws" else {})},
              "runtime_args": {"prescript": "cd .", "postscript": "echo done"}, "parameter_config": XY}
    path = _write(tmp_path, fields, HIMMELBLAU)
    assert load_experiment(path).resources.shutdown is True
    storage = f"sqlite:///{tmp_path / 'study.db'}" if resource == "aws" else None  # aws shares its study
    result = run_experiment(path, automatic=True, storage=storage)
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and where in warnings[0]
    assert warnings[0].startswith("slimkit: warning: resource_args.shutdown: true: slimkit starts and stops no "
                                  "machine, so nothing is shut down after the study")
    assert [r["state"] for r in result.rows] == ["complete"] * n_samples
    for row in result.rows:  # each result is the function at the trial's parameters
        x, y = row["params"]["x"], row["params"]["y"]
        assert row["result"] == pytest.approx((x * x + y - 11) ** 2 + (x + y * y - 7) ** 2)
    assert result.best[0]["result"] == min(r["result"] for r in result.rows)
