"""The experiment runner: one-time script jobs, seeded searches on Optuna, failures with log tails, resume."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slimkit.experiment import report_experiment, run_experiment
from slimkit.experiment.study import open_study

ROOT = Path(__file__).resolve().parents[2]

# A real compression script, as the reference's Step #3 writes it: slimkit's BasicConfig, create_compressor,
# compress, speedup, export, print_result.
PRUNE_SCRIPT = """#!/usr/bin/env python
import sys

import torch

import slimkit
from slimkit import zoo

config = slimkit.BasicConfig().load(sys.argv[1])
model, inputs = zoo.load("digits_cnn")
compressor = slimkit.create_compressor(model, config)
model = compressor.compress()
model = compressor.apply_speedup(dummy_input=inputs[:1])
_, _, x, y = zoo.digits_split()
with torch.no_grad():
    accuracy = float((model(x).argmax(-1) == y).float().mean())
compressor.export_model(model_path="model.safetensors", folder_name=config.folder_name)
slimkit.print_result(accuracy, params=sum(p.numel() for p in model.parameters()))
"""

# A light script (plain Python, Auptimizer's text protocol): its metric peaks at sparsity 0.6; "mode" in
# runtime_args makes it crash, hang, say nothing, or sleep before answering.
LIGHT_SCRIPT = """#!/usr/bin/env python
import json, sys, time
config = json.load(open(sys.argv[1]))
sparsity = config["config_list"][0]["sparsity"]
mode = config.get("mode", "ok")
print(f"job {config['job_id']} sparsity {sparsity}", flush=True)
if mode == "crash":
    raise RuntimeError("the model exploded at sparsity %s" % sparsity)
if mode == "hang":
    time.sleep(60)
if mode == "sleep":
    time.sleep(config.get("seconds", 1.0))
for step in range(3):
    print('#Auto: intermediate={"step": %d, "value": %r}' % (step, -(sparsity - 0.6) ** 2 - 0.1 * (2 - step)))
if mode != "silent":
    print("#Auto: result=%r" % (-(sparsity - 0.6) ** 2))
"""


def _experiment(tmp_path: Path, script: str, name: str = "exp", **fields) -> Path:
    (tmp_path / "job.py").write_text(script)
    (tmp_path / "job.py").chmod(0o755)
    exp = {"name": name, "script": "job.py", "resource": "cpu", "target": "max",
           "compression": {"framework": "torch", "type": "pruning", "compressor": "l1_filter",
                           "config_list": [{"sparsity": {"range": [0.1, 0.9], "type": "float"},
                                            "op_types": ["Conv2d"]}]}}
    exp.update(fields)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(exp))
    return path


def test_one_time_script_job_runs_the_users_script(tmp_path):
    exp = _experiment(tmp_path, PRUNE_SCRIPT, name="one")
    data = json.loads(exp.read_text())
    data["compression"]["config_list"] = [{"sparsity": 0.1, "op_types": ["Conv2d"]}]
    exp.write_text(json.dumps(data))
    result = run_experiment(exp, automatic=False, quiet=True)
    (row,) = result.rows
    assert row["state"] == "complete" and 0.5 < row["result"] <= 1.0 and result.kept == [0]
    trial = result.folder / row["trial_dir"]
    job = json.loads((trial / "job.json").read_text())
    assert job["config_list"] == [{"sparsity": 0.1, "op_types": ["Conv2d"]}] and job["compressor"] == "l1_filter"
    assert (trial / "model" / "model.safetensors").is_file()  # the script exported into its folder_name
    assert "#Auto: result=" in (trial / "log.txt").read_text()
    assert row["measured"]["params"] > 1000 and (result.folder / "results.csv").is_file()  # print_result extras
    # a second one-time run adds one more job; the first stays in the table
    again = run_experiment(exp, automatic=False, quiet=True)
    assert [r["number"] for r in again.rows] == [0, 1]
    assert again.rows[1]["result"] == pytest.approx(row["result"])


@pytest.mark.parametrize("proposer", ["random", "tpe"])
def test_seeded_search_is_reproducible(tmp_path, proposer):
    runs = []
    for folder in ("a", "b"):
        exp = _experiment(tmp_path, LIGHT_SCRIPT, name=f"search_{proposer}", proposer=proposer, random_seed=7,
                          n_samples=5)
        result = run_experiment(exp, automatic=True, folder=tmp_path / folder, quiet=True)
        runs.append(result)
    a, b = runs
    assert [r["params"] for r in a.rows] == [r["params"] for r in b.rows]
    assert [r["result"] for r in a.rows] == [r["result"] for r in b.rows]
    assert len(a.rows) == 5 and all(r["state"] == "complete" for r in a.rows)
    values = [r["params"]["config_list[0].sparsity"] for r in a.rows]
    assert all(0.1 <= v <= 0.9 for v in values) and len(set(values)) == 5
    best = max(a.rows, key=lambda r: r["result"])
    assert a.kept == [best["number"]] and best["result"] == pytest.approx(-(best["params"][
        "config_list[0].sparsity"] - 0.6) ** 2)
    with open(a.folder / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert [float(r["result"]) for r in table] == [r["result"] for r in a.rows]
    assert (a.folder / "history.png").stat().st_size > 1000


def test_failed_trials_are_recorded_with_their_log_tail(tmp_path):
    for mode, reason in [("crash", "the script exited with status 1"), ("silent", "reported no result"),
                         ("hang", "timed out after 2 s")]:
        exp = _experiment(tmp_path, LIGHT_SCRIPT, name=f"fail_{mode}", runtime_args={"mode": mode}, job_timeout=2,
                          n_samples=2, random_seed=0, proposer="random",
                          job_failure={"ignore_fail": True, "job_retries": 1})
        started = time.monotonic()
        result = run_experiment(exp, automatic=True, quiet=True)
        assert [r["state"] for r in result.rows] == ["failed", "failed"]  # the study went on after the first
        assert all(reason in r["reason"] for r in result.rows), result.rows[0]["reason"]
        assert result.kept == []
        if mode == "crash":
            assert "RuntimeError: the model exploded at sparsity" in result.rows[0]["log_tail"]
            trial = result.folder / result.rows[0]["trial_dir"]
            assert (trial / "log.attempt1.txt").is_file() and (trial / "log.txt").is_file()  # one retry
        if mode == "hang":
            assert time.monotonic() - started < 30  # 2 trials x 2 attempts x 2 s, not 60 s each
    saved = json.loads((result.folder / "results.json").read_text())
    assert saved["trials"][0]["state"] == "failed" and "timed out" in saved["trials"][0]["reason"]


def test_ignore_fail_false_stops_the_study(tmp_path):
    exp = _experiment(tmp_path, LIGHT_SCRIPT, name="stop", runtime_args={"mode": "crash"}, n_samples=4,
                      job_failure={"ignore_fail": False})
    result = run_experiment(exp, automatic=True, quiet=True)
    assert [r["state"] for r in result.rows] == ["failed"]


def test_early_stop_prunes_trials_through_optuna(tmp_path):
    exp = _experiment(tmp_path, LIGHT_SCRIPT, name="prune", n_samples=8, random_seed=3, proposer="random",
                      resource_args={"early_stop": True})
    result = run_experiment(exp, automatic=True, quiet=True)
    states = [r["state"] for r in result.rows]
    assert len(states) == 8 and "pruned" in states and "complete" in states
    study = open_study(result.folder, __import__("slimkit").experiment.load_experiment(
        result.folder / "experiment.json", True))
    assert all(t.intermediate_values for t in study.trials)


@pytest.mark.slow  # ~10 s: a runner killed and resumed (the slow tier holds the kill/resume runs)
def test_resume_after_the_runner_is_killed(tmp_path):
    exp = _experiment(tmp_path, LIGHT_SCRIPT, name="resume", n_samples=4, random_seed=1, proposer="random",
                      runtime_args={"mode": "sleep", "seconds": 1.5})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runner = subprocess.Popen([sys.executable, "-m", "slimkit", "run", str(exp), "--automatic"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder = tmp_path / "runs" / "resume"
    deadline = time.monotonic() + 120
    trials_dir = folder / "trials"
    while time.monotonic() < deadline:  # kill while the third trial's job runs
        if trials_dir.is_dir() and len(list(trials_dir.iterdir())) >= 3:
            break
        time.sleep(0.1)
    time.sleep(0.3)
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    exp_obj = __import__("slimkit").experiment.load_experiment(folder / "experiment.json", True)
    before = {t.number: t.values for t in open_study(folder, exp_obj).trials if t.state.name == "COMPLETE"}
    assert 1 <= len(before) < 4
    result = run_experiment(exp, automatic=True, quiet=True)
    complete = {r["number"]: [r["result"]] for r in result.rows if r["state"] == "complete"}
    assert len(complete) == 4 == len(result.rows)  # total = n_samples; the interrupted trial is not a row
    assert all(complete[n] == v for n, v in before.items())  # finished trials kept as they were
    interrupted = [t for t in open_study(folder, exp_obj).trials if t.user_attrs.get("interrupted")]
    assert len(interrupted) == 1 and interrupted[0].state.name == "FAIL"  # the trial the kill cut short
    assert interrupted[0].params in [r["params"] for r in result.rows]  # ... ran again with the same values
    again = report_experiment(folder, quiet=True)
    assert [r["number"] for r in again.rows] == [r["number"] for r in result.rows]


def test_parallel_workers_share_the_study_and_stop_at_n_samples(tmp_path):
    exp = _experiment(tmp_path, LIGHT_SCRIPT, name="parallel", n_samples=5, n_parallel=2, random_seed=4,
                      proposer="tpe", runtime_args={"mode": "sleep", "seconds": 0.5})
    result = run_experiment(exp, automatic=True, quiet=True)
    assert sorted(r["number"] for r in result.rows) == [0, 1, 2, 3, 4]
    assert all(r["state"] == "complete" for r in result.rows)
    logs = [(result.folder / r["trial_dir"] / "log.txt").read_text() for r in result.rows]
    assert all(f"job {r['number']} sparsity" in log for r, log in zip(result.rows, logs, strict=True))


def test_grid_proposer_visits_every_point_once(tmp_path):
    exp = _experiment(tmp_path, LIGHT_SCRIPT, name="grid", proposer="sequence", n_samples=10, random_seed=0)
    data = json.loads(exp.read_text())
    data["compression"]["config_list"][0]["sparsity"] = {"range": [0.2, 0.8], "type": "float", "interval": 0.2}
    exp.write_text(json.dumps(data))
    result = run_experiment(exp, automatic=True, quiet=True)  # 4 grid points: 4 trials, not 10
    assert sorted(r["params"]["config_list[0].sparsity"] for r in result.rows) == [0.2, 0.4, 0.6, 0.8]
    assert result.best[0]["params"]["config_list[0].sparsity"] == 0.6
