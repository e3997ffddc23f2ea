"""Scale-out: `slimkit worker` processes sharing one study in a real PostgreSQL server (conftest.py starts it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slimkit.errors import SlimkitError
from slimkit.experiment import load_experiment, report_experiment
from slimkit.experiment.storage import Store, redact
from slimkit.experiment.study import finished, interrupted, open_study

ROOT = Path(__file__).resolve().parents[2]

# Each job sleeps, then reports a metric peaking at sparsity 0.6 (Auptimizer's text protocol).
SLEEPY_SCRIPT = """#!/usr/bin/env python
import json, sys, time
config = json.load(open(sys.argv[1]))
sparsity = config["config_list"][0]["sparsity"]
print(f"job {config['job_id']} sparsity {sparsity}", flush=True)
time.sleep(config["seconds"])
print("#Auto: result=%r" % (-(sparsity - 0.6) ** 2))
"""


def _experiment(tmp_path: Path, name: str, **fields) -> Path:
    (tmp_path / "job.py").write_text(SLEEPY_SCRIPT)
    exp = {"name": name, "script": "job.py", "target": "max", "proposer": "random", "random_seed": 0,
           "runtime_args": {"seconds": 1.5},
           "compression": {"framework": "torch", "type": "pruning", "compressor": "l1_filter",
                           "config_list": [{"sparsity": {"range": [0.1, 0.9], "type": "float"},
                                            "op_types": ["Conv2d"]}]}}
    exp.update(fields)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(exp))
    return path


def _worker(exp: Path, url: str, output: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "slimkit", "worker", str(exp), "--storage", url,
                             "--heartbeat-interval", "1", "--output", str(output)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow  # ~30 s: two worker processes start, six 1.5 s jobs, a 3 s grace period
def test_a_killed_worker_loses_nothing_and_the_study_reaches_n_samples(tmp_path, postgres):
    exp = _experiment(tmp_path, "cluster", n_samples=6)
    url = postgres.url()
    a, b = tmp_path / "machine_a", tmp_path / "machine_b"  # each worker keeps its trial folders on "its machine"
    worker_a, worker_b = _worker(exp, url, a), _worker(exp, url, b)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait until B's second job is under way, then kill B (SIGKILL)
            logs = sorted((b / "trials").glob("*/log.txt")) if (b / "trials").is_dir() else []
            if len(logs) >= 2 and "sparsity" in logs[-1].read_text():
                break
            assert worker_b.poll() is None, worker_b.stdout.read()
            time.sleep(0.1)
        else:
            pytest.fail("worker B never started a second trial")
        killed_number = int(logs[-1].parent.name)
        worker_b.send_signal(signal.SIGKILL)
        worker_b.wait()
        store = Store(url, 1, 3)
        study = open_study(a, load_experiment(exp, True), store=store)
        before = {t.number: t.values for t in study.get_trials() if t.state.name == "COMPLETE"}
        # B died inside this trial: still RUNNING, or already FAIL when A saw its heartbeat stop (a loaded machine)
        assert study.trials[killed_number].state.name in ("RUNNING", "FAIL")
        out, _ = worker_a.communicate(timeout=120)
        assert worker_a.returncode == 0, out
    finally:
        for proc in (worker_a, worker_b):
            if proc.poll() is None:
                proc.kill()
    trials = study.get_trials()
    done = finished(trials)
    assert len(done) == 6 and all(t.state.name == "COMPLETE" for t in done)  # reached n_samples exactly
    assert all(trials[n].values == v for n, v in before.items())  # nothing finished was lost
    stale = trials[killed_number]
    assert stale.state.name == "FAIL" and interrupted(trials) == {killed_number}  # heartbeat stopped -> failed
    (retry,) = [t for t in trials if t.system_attrs.get("failed_trial") == killed_number]
    assert retry.state.name == "COMPLETE" and retry.params == stale.params  # ... and run again by worker A
    assert (a / "trials" / f"{retry.number:04d}" / "log.txt").is_file()
    result = report_experiment(a, quiet=True, storage=url)  # any worker's folder reports the whole study
    assert sorted(r["number"] for r in result.rows) == sorted(t.number for t in done)
    best = max(done, key=lambda t: t.values[0])
    assert result.kept == [best.number]
    saved = json.loads((a / "run.json").read_text())
    assert saved["storage"]["url"] == redact(url) and postgres.url() not in (a / "run.json").read_text()


def test_an_unreachable_or_refused_database_names_the_url_without_its_password(tmp_path, postgres):
    wrong = postgres.url(password="not-the-password")
    with pytest.raises(SlimkitError) as info:
        Store(wrong).open(tmp_path)
    message = str(info.value)
    assert "not-the-password" not in message and redact(wrong) in message and "***" in message
    assert "password authentication failed" in message  # the server's own words
    closed = f"postgresql://slimkit:pw@127.0.0.1:{postgres.port + 1}/postgres"
    exp = _experiment(tmp_path, "refused", n_samples=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "slimkit", "worker", str(exp), "--storage", closed], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "postgresql://slimkit:***@127.0.0.1" in done.stderr and ":pw@" not in done.stderr
    assert "refused" in done.stderr.lower()


def test_one_study_name_one_experiment_and_workers_need_a_database(tmp_path, postgres):
    from slimkit.errors import ConfigError
    from slimkit.experiment.runner import run_experiment

    exp = _experiment(tmp_path, "named", n_samples=1, runtime_args={"seconds": 0.0})
    result = run_experiment(exp, automatic=True, quiet=True, storage=postgres.url(), folder=tmp_path / "one")
    assert [r["state"] for r in result.rows] == ["complete"]
    (tmp_path / "elsewhere").mkdir()
    other = _experiment(tmp_path / "elsewhere", "named", n_samples=3, runtime_args={"seconds": 0.0})
    with pytest.raises(ConfigError, match="belongs to a different experiment.*n_samples"):
        run_experiment(other, automatic=True, quiet=True, storage=postgres.url(), folder=tmp_path / "two")
    with pytest.raises(ConfigError, match="--storage postgresql://"):
        run_experiment(exp, quiet=True, worker=True)
    with pytest.raises(ConfigError, match="--heartbeat-interval: whole seconds >= 1"):
        run_experiment(exp, automatic=True, quiet=True, storage=postgres.url(), heartbeat_interval=0)
    with pytest.raises(ConfigError, match="storage: 'postgres-db' is not a database URL"):
        Store("postgres-db").open(tmp_path)


def test_run_with_two_local_workers_on_the_database(tmp_path, postgres):
    from slimkit.experiment.runner import run_experiment

    exp = _experiment(tmp_path, "local_pair", n_samples=4, n_parallel=2, runtime_args={"seconds": 0.5})
    result = run_experiment(exp, automatic=True, quiet=True, storage=postgres.url(), heartbeat_interval=1)
    assert sorted(r["number"] for r in result.rows) == [0, 1, 2, 3]  # exactly n_samples, no duplicate asks
    assert all(r["state"] == "complete" for r in result.rows)
    logs = [(result.folder / r["trial_dir"] / "log.txt").read_text() for r in result.rows]
    assert all(f"job {r['number']} sparsity" in log for r, log in zip(result.rows, logs, strict=True))


def test_a_password_in_the_file_stays_out_of_the_run_folder(tmp_path, postgres):
    from slimkit.experiment.runner import run_experiment

    exp = _experiment(tmp_path, "secret", n_samples=1, runtime_args={"seconds": 0.0}, storage=postgres.url())
    assert redact(postgres.url()) != postgres.url()  # the URL carries a password
    result = run_experiment(exp, automatic=True, quiet=True)
    saved = [(result.folder / name).read_text() for name in ("experiment.json", "run.json")]
    assert all(postgres.url() not in text and redact(postgres.url()) in text for text in saved)
    again = run_experiment(exp, automatic=True, quiet=True)  # the same file resumes the same folder
    assert again.folder == result.folder and [r["state"] for r in again.rows] == ["complete"]


def test_a_worker_dying_right_after_asking_still_has_its_trial_failed(tmp_path, postgres):
    """Optuna records no heartbeat at ask(); slimkit records one at once, so the trial goes stale and is retried."""
    import time

    import optuna

    from slimkit.experiment.experiment_file import load_experiment
    from slimkit.experiment.runner import _next_trial
    from slimkit.experiment.study import open_study

    exp = load_experiment(_experiment(tmp_path, "gap", n_samples=2, runtime_args={"seconds": 0.0}), True)
    folder = tmp_path / "gap_run"
    folder.mkdir()
    store = Store(postgres.url(), 1, 2)
    study = open_study(folder, exp, store=store)
    asked = _next_trial(study, store, folder, 2)
    assert isinstance(asked, optuna.Trial)  # ... and the worker dies here, before its Heartbeat thread starts
    time.sleep(3.5)
    optuna.storages.fail_stale_trials(study)
    trials = study.get_trials(deepcopy=False)
    assert trials[asked.number].state == optuna.trial.TrialState.FAIL
    assert any(asked.number in t.system_attrs.get("retry_history", ()) for t in trials)  # queued again
