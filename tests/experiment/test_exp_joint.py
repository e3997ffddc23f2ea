"""The script-free joint search on digits_cnn: pruner x sparsity x quantizer, a measured Pareto front."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from slimkit import zoo
from slimkit.engine import SmashedModel
from slimkit.evaluation import size_on_disk
from slimkit.experiment import run_experiment
from slimkit.experiment.jobs import JobTimeout, _time_limit
from slimkit.zoo import digits_split

EXPERIMENT = {
    "name": "joint",
    "model": "digits_cnn",
    "n_samples": 6,
    "random_seed": 0,
    "proposer": "nsga2",
    "resource_args": {"save_model": True},
    "runtime_args": {"repeats": 3, "warmup": 1, "threads": 1},
    "objectives": {"accuracy": "max", "latency": "min"},
    "search": {"pruner": [None, "l1_filter"], "quantizer": [None, "int8_dynamic"],
               "l1_filter_sparsity": {"range": [0.05, 0.6], "type": "float"}},
}


def _dominates(a: dict, b: dict) -> bool:
    return (a["accuracy"] >= b["accuracy"] and a["latency"] <= b["latency"]
            and (a["accuracy"] > b["accuracy"] or a["latency"] < b["latency"]))


def test_joint_search_returns_a_reloadable_pareto_front(tmp_path):
    path = tmp_path / "joint.json"
    path.write_text(json.dumps(EXPERIMENT))
    result = run_experiment(path, automatic=True, quiet=True)
    done = [r for r in result.rows if r["state"] == "complete"]
    assert len(result.rows) == 6 and len(done) == 6
    for row in done:  # conditional: the sparsity exists only where l1_filter was chosen
        assert ("l1_filter_sparsity" in row["params"]) == (row["params"]["pruner"] == "l1_filter")
        assert row["measured"]["size"] > 0 and row["measured"]["params"] > 0
    front = result.best
    assert front and all(r["kept"] for r in front)
    for point in front:  # non-dominated among every measured trial
        assert not any(_dominates(other, point) for other in done)
    for other in done:
        if not other["kept"]:
            assert any(_dominates(point, other) or (point["accuracy"], point["latency"]) ==
                       (other["accuracy"], other["latency"]) for point in front)
            assert not (result.folder / other["trial_dir"] / "model").exists()  # only the Pareto set is kept
    _, _, x, y = digits_split()
    for point in front:
        model = SmashedModel.from_pretrained(result.folder / point["trial_dir"] / "model")
        with torch.inference_mode():
            accuracy = float((model(x).argmax(-1) == y).float().mean())
        assert abs(accuracy - point["accuracy"]) < 1e-6
    assert Path(result.folder / "pareto.png").stat().st_size > 1000
    assert json.loads((result.folder / "results.json").read_text())["kept"] == result.kept


def test_other_models_are_judged_by_cosine_and_slow_trials_fail_with_their_log(tmp_path):
    spec = {"name": "mlp", "model": "mlp", "n_samples": 3, "random_seed": 1, "proposer": "random",
            "objectives": {"cosine": "max", "size": "min"}, "runtime_args": {"repeats": 2, "threads": 1},
            "search": {"quantizer": [None, "int8_dynamic", "half"]}}
    path = tmp_path / "mlp.json"
    path.write_text(json.dumps(spec))
    result = run_experiment(path, automatic=True, quiet=True)
    assert [r["state"] for r in result.rows] == ["complete"] * 3
    base_size = size_on_disk(zoo.load("mlp").model)
    for row in result.rows:
        if row["params"]["quantizer"] is None:
            assert row["cosine"] == 1.0 and abs(row["size"] - base_size) < 0.05 * base_size
        else:  # half or int8: close to the base outputs, at most ~half the bytes
            assert 0.9 < row["cosine"] < 1.0 and row["size"] < 0.6 * base_size
    path.write_text(json.dumps({**spec, "name": "slow", "job_timeout": 0.001}))
    slow = run_experiment(path, automatic=True, quiet=True)
    assert [r["state"] for r in slow.rows] == ["failed"] * 3
    assert all("JobTimeout: timed out after 0.001 s" in r["reason"] for r in slow.rows)
    assert "slimkit.experiment.jobs.JobTimeout: timed out" in slow.rows[0]["log_tail"] and slow.kept == []


def test_a_list_valued_hyperparameter_is_one_fixed_value_and_one_choice_is_fixed():
    from slimkit.experiment.smash_space import parse_search

    space = parse_search({"pruner": [None, "l1_filter"], "l1_filter_op_names": ["*intermediate.dense"],
                          "l1_filter_sparsity": [0.3], "quantizer": ["rtn"], "rtn_bits": [2, 4]}, True)
    assert space.fixed == {"quantizer": "rtn", "l1_filter_op_names": ["*intermediate.dense"],
                           "l1_filter_sparsity": 0.3}
    assert [(p.name, p.choices) for p in space.params] == [("pruner", [None, "l1_filter"]), ("rtn_bits", [2, 4])]
    cfg = space.config({"pruner": "l1_filter", "rtn_bits": 2})
    assert list(cfg["l1_filter_op_names"]) == ["*intermediate.dense"] and cfg["rtn_bits"] == 2


def test_a_timeout_that_the_job_swallows_still_fails_the_trial():
    with pytest.raises(JobTimeout, match="timed out after 0.01 s"):
        with _time_limit(0.01):
            try:
                time.sleep(0.2)  # the alarm fires here ...
            except BaseException:  # noqa: S110 - ... and is swallowed, as Python does inside __del__ or gc callbacks
                pass
