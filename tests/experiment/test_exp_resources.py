"""Auptimizer's resources on slimkit: ``node`` and ``passive`` through one shared study, and the job's shell.

``node``: every machine (this one included) runs trials of one study in PostgreSQL (conftest.py starts a real
server); ``passive``: ``slimkit run`` creates the study and runs no job while ``slimkit worker`` processes started
separately finish it. Auptimizer's SSH settings (``max_retries``, ``reconn_wait_time``, ``async_*``) and
``runtime_args`` (``prescript``, ``postscript``, ``env``) are honoured as documented in
:mod:`slimkit.experiment.resources`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from slimkit.errors import ConfigError, SlimkitError
from slimkit.experiment import load_experiment, run_experiment
from slimkit.experiment.storage import Store, forget_connections, redact

ROOT = Path(__file__).resolve().parents[2]

# Reports -(x - 0.25)^2 and what the job's shell set up: the prescript's and env's variables.
SCRIPT = """import json, os, sys, time
c = json.load(open(sys.argv[1]))
time.sleep(c.get("seconds", 0.0))
print("job", c["job_id"], "pre", os.environ.get("FROM_PRESCRIPT"), "env", os.environ.get("FROM_ENV"), flush=True)
print("#Auto: result=%r" % (-(c["x"] - 0.25) ** 2))
"""


def _experiment(folder: Path, **fields) -> Path:
    (folder / "job.py").write_text(SCRIPT)
    exp = {"name": folder.name, "script": "job.py", "target": "max", "proposer": "random", "random_seed": 0,
           "n_samples": 4, "parameter_config": [{"name": "x", "range": [-1, 1], "type": "float"}], **fields}
    path = folder / "exp.json"
    path.write_text(json.dumps(exp))
    return path


def _join_study(path: Path, url: str, folder: Path) -> None:
    forget_connections()  # a forked process must not reuse this process's database connections
    run_experiment(path, storage=url, worker=True, quiet=True, folder=folder, heartbeat_interval=1)


def _worker(path: Path, url: str, folder: Path) -> multiprocessing.Process:
    """What `slimkit worker EXP --storage URL --output FOLDER` runs, in a process of its own (forked: no import)."""
    process = multiprocessing.get_context("fork").Process(target=_join_study, args=(path, url, folder))
    process.start()
    return process


def test_the_job_runs_in_the_shell_runtime_args_describe(tmp_path):
    path = _experiment(tmp_path, n_samples=1, runtime_args={
        "prescript": "export FROM_PRESCRIPT=set-before", "postscript": "echo after the job", "env": {"FROM_ENV": 7},
        "overwrite": True, "seconds": 0.0})
    result = run_experiment(path, quiet=True)
    (row,) = result.rows
    assert row["state"] == "complete"
    trial = result.folder / row["trial_dir"]
    log = (trial / "log.txt").read_text()
    assert "job 0 pre set-before env 7" in log and log.rstrip().endswith("after the job")
    assert log.startswith("$ export FROM_PRESCRIPT=set-before; ")
    config = json.loads((trial / "job.json").read_text())  # the runner's keys stay out of the job config
    assert config["seconds"] == 0.0 and not {"prescript", "postscript", "env", "overwrite"} & set(config)


def test_a_failing_job_keeps_its_status_after_the_postscript(tmp_path):
    (tmp_path / "job.py").write_text("import sys\nsys.exit('broken job')\n")
    path = _experiment(tmp_path, n_samples=1, runtime_args={"postscript": "echo cleaned up"})
    (tmp_path / "job.py").write_text("import sys\nsys.exit('broken job')\n")
    (row,) = run_experiment(path, quiet=True).rows
    assert row["state"] == "failed" and "exited with status 1" in row["reason"]
    assert "broken job" in row["log_tail"] and "cleaned up" in row["log_tail"]


def test_node_and_passive_need_a_shared_study(tmp_path):
    for kind in ("node", "passive"):
        path = _experiment(tmp_path, resource=kind)
        assert load_experiment(path).resource == kind  # the file is valid as written ...
        with pytest.raises(ConfigError, match=rf"resource: '{kind}' .* --storage postgresql://.*slimkit worker"):
            run_experiment(path, quiet=True)  # ... and running it says what it needs
    path = _experiment(tmp_path, resource_args={"max_retries": 2})
    with pytest.raises(ConfigError, match="resource_args.max_retries: a setting of a study shared through a database"):
        run_experiment(path, quiet=True)


def test_auptimizer_node_settings_become_the_worker_settings(tmp_path):
    exp = load_experiment(_experiment(tmp_path, resource="node", resource_args={
        "max_retries": 2, "reconn_wait_time": 3, "async_run": True, "async_reconnect": 4, "async_timeout": 100}))
    spec = exp.resources
    assert (spec.connect_retries, spec.connect_wait, spec.heartbeat, exp.job_timeout) == (2, 3.0, 4, 100.0)
    explicit = load_experiment(_experiment(tmp_path, resource="node", job_timeout=5,
                                           resource_args={"async_timeout": 100}))
    assert explicit.job_timeout == 5.0  # the file's own job_timeout wins


def test_max_retries_tries_the_database_again_before_giving_up(tmp_path, monkeypatch):
    calls = []
    real = Store._connect

    def counting(self):
        calls.append(1)
        return real(self)

    monkeypatch.setattr(Store, "_connect", counting)
    closed = "postgresql://slimkit:pw@127.0.0.1:9/postgres"  # port 9 (discard): nothing listens
    with pytest.raises(SlimkitError, match=r"Cannot open the study storage postgresql://slimkit:\*\*\*@127\.0\.0\.1"):
        Store(closed, connect_retries=2, connect_wait=0.0).open(tmp_path)
    assert len(calls) == 3  # the first attempt and max_retries more


def test_the_journal_syncs_a_trials_end_not_each_intermediate_value(tmp_path, monkeypatch):
    import optuna

    from slimkit.experiment import storage

    synced = []
    monkeypatch.setattr(storage.os, "fsync", lambda fd: synced.append(fd))
    study = optuna.create_study(storage=Store().open(tmp_path), study_name="s")
    assert len(synced) == 1  # the study's creation
    trial = study.ask()
    for step in range(5):
        trial.report(0.1 * step, step)
    trial.set_user_attr("trial_dir", "trials/0000")
    assert len(synced) == 1  # the trial, its curve and attributes: written, not synced one by one
    study.tell(trial, 0.5)
    assert len(synced) == 2  # the trial's end is synced
    again = optuna.load_study(study_name="s", storage=Store().open(tmp_path))  # a fresh reader replays it all
    (done,) = again.trials
    assert done.value == 0.5 and done.intermediate_values == {k: 0.1 * k for k in range(5)}


def test_workers_of_neighbouring_seeds_never_share_a_seed():
    from slimkit.experiment.study import worker_seed

    assert worker_seed(5, 0) == 5  # one worker: the file's seed itself
    seeds = {(s, o): worker_seed(s, o) for s in range(4) for o in (0, 1, 2, 1000, 1_000_000)}
    assert len(set(seeds.values())) == len(seeds)  # seed + offset gave seed 0's worker 1 the seed of seed 1
    assert all(0 <= v < 2**31 for v in seeds.values())


def test_a_relative_output_folder_is_found_by_the_jobs(tmp_path, monkeypatch):
    path = _experiment(tmp_path, n_samples=2, runtime_args={"seconds": 0.0})
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # jobs run in workingdir, not here: their job.json path is absolute
    result = run_experiment(path, quiet=True, folder="runs/relative")
    assert result.counts() == {"complete": 2} and result.folder == tmp_path / "elsewhere" / "runs" / "relative"


@pytest.mark.slow  # 10-20 s: a PostgreSQL server and two worker processes
def test_passive_waits_while_two_workers_finish_the_study(tmp_path, postgres, capsys):
    url = postgres.url()
    path = _experiment(tmp_path, resource="passive", n_samples=6, runtime_args={"seconds": 0.3})
    a, b = tmp_path / "machine_a", tmp_path / "machine_b"
    workers = [_worker(path, url, a), _worker(path, url, b)]
    try:
        result = run_experiment(path, storage=url, heartbeat_interval=1)
    finally:
        for process in workers:
            process.join(timeout=60)
    assert [p.exitcode for p in workers] == [0, 0]
    assert sorted(r["number"] for r in result.rows) == list(range(6)) and result.counts() == {"complete": 6}
    assert not (result.folder / "trials").exists()  # the passive runner ran no job itself
    ran = {int(p.name) for machine in (a, b) for p in (machine / "trials").glob("*")}
    assert ran == set(range(6)) and all((m / "trials").is_dir() for m in (a, b))  # both workers took trials
    err = capsys.readouterr().err
    assert f"slimkit worker {path} --storage {shlex.quote(redact(url))}" in err and url not in err
    assert len({r["params"]["x"] for r in result.rows}) == 6  # each worker samples with a seed of its own
    (best,) = result.best
    assert best["result"] == max(r["result"] for r in result.rows)


@pytest.mark.slow  # 5-10 s: a PostgreSQL server, this runner and one more worker
def test_node_runs_trials_here_and_on_the_other_workers(tmp_path, postgres):
    url = postgres.url()
    path = _experiment(tmp_path, resource="node", n_samples=6, runtime_args={"seconds": 0.3},
                       resource_args={"max_retries": 1, "reconn_wait_time": 1, "async_reconnect": 1})
    other = _worker(path, url, tmp_path / "other_machine")
    try:
        result = run_experiment(path, storage=url, quiet=True)
    finally:
        other.join(timeout=60)
    assert other.exitcode == 0 and result.counts() == {"complete": 6}
    here = {int(p.name) for p in (result.folder / "trials").glob("*")}
    there = {int(p.name) for p in (tmp_path / "other_machine" / "trials").glob("*")}
    assert here and there and here | there == set(range(6)) and not here & there
    run = json.loads((result.folder / "run.json").read_text())
    assert run["storage"]["heartbeat_interval"] == 1  # async_reconnect


@pytest.mark.slow  # 15-60 s: three fresh Python processes importing slimkit
def test_passive_from_the_command_line_with_two_slimkit_workers(tmp_path, postgres):
    url = postgres.url()
    path = _experiment(tmp_path, resource="passive", n_samples=4, runtime_args={"seconds": 0.2})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def slimkit(*args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "slimkit", *args, "--storage", url], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    runner = slimkit("run", str(path), "--output", str(tmp_path / "study"))
    workers = [slimkit("worker", str(path), "--output", str(tmp_path / f"w{i}")) for i in range(2)]
    out, err = runner.communicate(timeout=240)
    for worker in workers:
        worker.communicate(timeout=60)
    assert runner.returncode == 0 and all(w.returncode == 0 for w in workers), err
    assert "resource 'passive': this process runs no job" in err and "4 complete" in out
