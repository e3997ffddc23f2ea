"""``slimkit run exp.json [--automatic]``: run an experiment's trials on Optuna and report them.

One-time mode runs one job with the file's fixed values. Automatic mode runs ``n_samples`` trials proposed by
the proposer's Optuna sampler in ``n_parallel`` worker processes sharing the journal storage in the experiment
folder. Running the same command again resumes: finished trials are kept, trials a killed runner left running
are re-run with the same parameters, and the study stops at ``n_samples`` finished trials.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from slimkit.core.io import write_json_atomic
from slimkit.errors import ConfigError
from slimkit.experiment.experiment_file import Experiment, load_experiment
from slimkit.experiment.jobs import JobOutcome, die_with_parent, run_script_job, run_smash_job
from slimkit.experiment.passive import wait_for_workers
from slimkit.experiment.proposers import MULTI_FIDELITY
from slimkit.experiment.report import ExperimentResult, finish, progress_line
from slimkit.experiment.resources import job_values, needs_database, shutdown_warning
from slimkit.experiment.storage import Heartbeat, Store, file_lock, forget_connections, redact
from slimkit.experiment.study import (
    POLL_SECONDS,
    STOP_ATTR,
    STOP_FILE,
    finished,
    folder_store,
    grid_size,
    n_counted,
    open_study,
    recover_interrupted,
    trial_id,
)

EXPERIMENT_FILE = "experiment.json"
#: study user attribute counting the worker processes that joined a shared study (each seeds its sampler apart)
JOINED_ATTR = "workers_joined"


def _run_trial(exp: Experiment, folder: Path, trial: optuna.Trial, bench: Any) -> JobOutcome:
    if exp.smash_space is not None:
        values = exp.smash_space.suggest(trial)
    else:
        values = {p.name: p.suggest(trial) for p in exp.params}
    trial_dir = folder / "trials" / f"{trial.number:04d}"
    trial.set_user_attr("trial_dir", str(trial_dir.relative_to(folder)))

    def on_intermediate(step: int, value: float) -> bool:
        if not exp.track_intermediate_results or len(exp.directions) > 1:
            return False  # Optuna's pruners follow one objective
        trial.report(value, step)
        return (exp.early_stop or exp.proposer in MULTI_FIDELITY) and trial.should_prune()

    outcome = JobOutcome("failed")
    for attempt in range(exp.job_retries + 1):
        if attempt and (trial_dir / "log.txt").is_file():
            (trial_dir / "log.txt").rename(trial_dir / f"log.attempt{attempt}.txt")
        if exp.script is not None:
            outcome = run_script_job(exp, values, trial_dir, trial.number, on_intermediate)
        else:
            outcome = run_smash_job(exp, bench, values, trial_dir)
        if outcome.state != "failed":
            break
    trial.set_user_attr("attempts", attempt + 1)
    trial.set_user_attr("log_tail", outcome.log_tail)
    if outcome.reason:
        trial.set_user_attr("reason", outcome.reason)
    if outcome.extra:
        trial.set_user_attr("measured", outcome.extra)
    return outcome


def _next_trial(study: optuna.Study, store: Store, folder: Path, n_samples: int) -> optuna.Trial | str:
    """Ask for a trial, or say why not: ``done`` (n_samples finished or stopped) or ``wait`` (others still run)."""
    if store.shared:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)  # a dead worker's trial: failed and queued again
    with store.ask_lock(folder, study.study_name):
        if (folder / STOP_FILE).exists() or study.user_attrs.get(STOP_ATTR):
            return "done"
        trials = study.get_trials(deepcopy=False)
        if len(finished(trials)) >= n_samples:
            return "done"
        if n_counted(trials) >= n_samples:
            # the rest are running: locally they end with this runner; in a shared store a dead worker's trial
            # is found by its missing heartbeat and queued again, so wait for it
            return "wait" if store.shared else "done"
        with warnings.catch_warnings():  # heartbeats are recorded by slimkit's own thread, not Study.optimize
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            trial = study.ask()
        if store.shared:  # a first heartbeat at once: a worker dying before its Heartbeat thread starts is found too
            study._storage.record_heartbeat(trial._trial_id)
        return trial


def work(folder: str | Path, automatic: bool, index: int, n_samples: int, echo: bool = False,
         store: Store | None = None) -> None:
    """One worker: ask the study for trials until ``n_samples`` are finished, run each, tell the result."""
    if index:  # a forked or spawned worker process
        die_with_parent()
        forget_connections()
    folder, store = Path(folder), store or Store()
    exp = load_experiment(folder / EXPERIMENT_FILE, automatic)
    with store.ask_lock(folder, store.study_name(exp.name)):
        first = open_study(folder, exp, store=store)
        offset = index + 1000 * len(first.get_trials(deepcopy=False))
        if store.shared:  # workers on several machines all have index 0: each process joining gets its own seed
            joined = int(first.user_attrs.get(JOINED_ATTR, 0))
            first.set_user_attr(JOINED_ATTR, joined + 1)
            offset = 1_000_000 * (joined + 1) + index
    study = open_study(folder, exp, offset, store=store)
    bench = None
    if exp.model is not None:
        from slimkit.experiment.bench import Bench

        bench = Bench(exp.model, exp.objectives, exp.n_parallel, job_values(exp.runtime_args))
    while True:
        trial = _next_trial(study, store, folder, n_samples)
        if trial == "done":
            break
        if trial == "wait":
            time.sleep(POLL_SECONDS)
            continue
        with Heartbeat(study._storage, trial_id(study, trial.number)):
            outcome = _run_trial(exp, folder, trial, bench)
        if outcome.state == "complete":
            study.tell(trial, outcome.values)
        else:
            study.tell(trial, state=TrialState.PRUNED if outcome.state == "pruned" else TrialState.FAIL)
        if outcome.state == "failed" and not exp.ignore_fail:
            study.set_user_attr(STOP_ATTR, f"trial {trial.number} failed and job_failure.ignore_fail is false")
        if echo:
            print(progress_line(exp, study.get_trials(deepcopy=False), n_samples), file=sys.stderr, flush=True)


def _prepare_folder(exp: Experiment, automatic: bool, folder: Path, store: Store) -> dict[str, Any]:
    raw = {**exp.raw, "name": exp.name, "workingdir": str(exp.workingdir)}
    if isinstance(raw.get("storage"), str):  # the folder keeps no password: report/resume ask for the URL
        raw["storage"] = redact(raw["storage"])
    saved = folder / EXPERIMENT_FILE
    if saved.is_file():
        before = json.loads(saved.read_text())
        if before != raw:
            changed = sorted(k for k in set(before) | set(raw) if before.get(k) != raw.get(k))
            raise ConfigError(f"{folder} holds the study of a different experiment (fields that differ: "
                              f"{', '.join(changed)}); to start afresh delete that folder or run with --output "
                              "ANOTHER_FOLDER, or restore the file to resume.")
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(saved, raw)
    where = None if store.url is None else {"url": redact(store.url), "heartbeat_interval": store.heartbeat_interval,
                                            "grace_period": store.grace_period}
    write_json_atomic(folder / "run.json", {"automatic": automatic, "source": str(exp.path or ""), "storage": where})
    (folder / STOP_FILE).unlink(missing_ok=True)
    return raw


def _same_experiment(study: optuna.Study, exp: Experiment, store: Store) -> None:
    """A shared study remembers its experiment (paths aside); a different file under the same name is refused."""
    mine = {k: v for k, v in exp.raw.items() if k not in ("workingdir", "storage")}
    theirs = study.user_attrs.get("experiment")
    if theirs is None:
        study.set_user_attr("experiment", mine)
    elif theirs != mine:
        changed = sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))
        raise ConfigError(f"The study {study.study_name!r} in {redact(store.url or '')} belongs to a different "
                          f"experiment (fields that differ: {', '.join(changed)}); give this experiment another "
                          "'name', or use the same file on every worker.")


def run_experiment(source: str | os.PathLike | Mapping[str, Any], automatic: bool = False,
                   folder: str | os.PathLike | None = None, quiet: bool = False, storage: str | None = None,
                   heartbeat_interval: int | None = None, worker: bool = False) -> ExperimentResult:
    """Run an experiment file (or dict) once (one job) or, with ``automatic``, its search; return the results.

    Results go to ``folder`` (default ``<workingdir>/runs/<name>``): the Optuna journal, one folder per trial
    (``job.json``, ``log.txt``, ``model/``), ``results.csv``, ``results.json`` and PNG plots. ``storage`` (or the
    file's ``"storage"``) is a database URL several machines share; ``worker=True`` is ``slimkit worker``: join
    that study beside other workers (no exclusive folder lock, no local recovery: heartbeats find dead workers).
    ``heartbeat_interval`` (seconds) defaults to the file's ``resource_args.async_reconnect``, else 10.
    With ``"resource": "passive"`` this process runs no job: it creates the study, prints the worker command
    and waits until workers started elsewhere have finished it (:mod:`slimkit.experiment.resources`).
    """
    automatic = automatic or worker  # a worker joins a search
    exp = load_experiment(source, automatic)
    automatic = automatic or bool(exp.hyperparameters)  # Auptimizer's parameter_config is always a search
    url = storage or exp.storage
    if worker and url is None:
        raise ConfigError("slimkit worker joins a study in a database several machines share; give --storage "
                          "postgresql://USER@HOST:PORT/DB (or \"storage\" in the file). On one machine, use "
                          "`slimkit run EXPERIMENT --automatic` with n_parallel workers.")
    needs_database(exp.resources, url)
    if (warning := shutdown_warning(exp.resources)) and not quiet:
        print(warning, file=sys.stderr)
    if heartbeat_interval is None:
        heartbeat_interval = exp.resources.heartbeat or 10
    if isinstance(heartbeat_interval, bool) or not isinstance(heartbeat_interval, int) or heartbeat_interval < 1:
        raise ConfigError(f"--heartbeat-interval: whole seconds >= 1 between a running trial's heartbeats; got "
                          f"{heartbeat_interval!r}.")
    store = (Store(url, heartbeat_interval, 3 * heartbeat_interval, exp.resources.connect_retries,
                   exp.resources.connect_wait) if url else Store())
    out = Path(folder).resolve() if folder is not None else exp.default_folder()  # jobs run in workingdir
    out.mkdir(parents=True, exist_ok=True)
    with file_lock(out / "runner.lock", blocking=False, shared=worker) as got:
        if not got:
            raise ConfigError(f"Another `slimkit {'run' if worker else 'run or worker'}` is running the experiment "
                              f"in {out}; wait for it, or give this one its own folder with --output.")
        _prepare_folder(exp, automatic, out, store)
        study = open_study(out, exp, store=store)
        if store.shared:
            _same_experiment(study, exp, store)
        if study.user_attrs.get(STOP_ATTR) and not worker:
            study.set_user_attr(STOP_ATTR, "")
        cut = [] if store.shared else recover_interrupted(out, study)
        done = finished(study.get_trials(deepcopy=False))
        if automatic:
            n_samples = min(exp.n_samples, grid_size(exp)) if exp.proposer in ("grid", "sequence") else exp.n_samples
            if n_samples < exp.n_samples and not quiet:
                print(f"slimkit: the grid has {n_samples} points; running {n_samples} trials, not "
                      f"{exp.n_samples}.", file=sys.stderr)
        else:
            n_samples = len(done) + 1  # one more job per one-time run; earlier ones stay in the table
        if not quiet:
            mode = (f"automatic search, {n_samples} trial(s), proposer {exp.proposer}, {exp.n_parallel} worker(s)"
                    if automatic else "one-time run (one job)")
            where = f", study {study.study_name!r} in {redact(url)}" if url else ""
            print(f"slimkit: {exp.name!r}: {mode}, folder {out}{where}", file=sys.stderr)
            if done or cut:
                print(f"slimkit: resuming: {len(done)} finished trial(s) kept"
                      + (f", {len(cut)} interrupted trial(s) queued again" if cut else ""), file=sys.stderr)
        workers = exp.n_parallel if automatic else 1
        if exp.resource == "passive" and not worker:
            wait_for_workers(out, exp, study, store, n_samples, quiet, EXPERIMENT_FILE)
        elif workers == 1:
            work(out, automatic, 0, n_samples, echo=not quiet, store=store)
        else:
            _run_workers(out, exp, automatic, workers, n_samples, quiet, store)
        return finish(out, exp, quiet=quiet, store=store)


def _run_workers(folder: Path, exp: Experiment, automatic: bool, workers: int, n_samples: int, quiet: bool,
                 store: Store) -> None:
    """Run worker 0 in this process and start ``workers - 1`` more.

    Script experiments fork them (their workers only start job processes; a spawned worker would first import
    slimkit afresh, seconds on a busy machine). Script-free ones spawn them: they run torch, which must not
    inherit a forked OpenMP thread pool. This process starts its first trial at once either way.
    """
    forks = exp.script is not None and "fork" in multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if forks else "spawn")
    sys.stdout.flush()
    sys.stderr.flush()
    processes = [context.Process(target=work, args=(str(folder), automatic, i, n_samples, False, store),
                                 daemon=False) for i in range(1, workers)]
    for process in processes:
        process.start()
    stopped = True
    try:
        work(folder, automatic, 0, n_samples, echo=not quiet, store=store)
        stopped = False
    finally:
        for process in processes:  # they stop asking once n_samples are counted; wait for their last trials
            process.join(timeout=0 if stopped else None)
            if process.is_alive():
                process.kill()
    crashed = [p.exitcode for p in processes if p.exitcode]
    if crashed and not quiet:
        print(f"slimkit: {len(crashed)} worker process(es) ended with status {crashed}; see the trial logs.",
              file=sys.stderr)


def report_experiment(folder: str | os.PathLike, quiet: bool = False, storage: str | None = None
                      ) -> ExperimentResult:
    """Reprint the table and rewrite CSV, JSON and plots of an experiment folder (``slimkit report``)."""
    out = Path(folder)
    if not (out / EXPERIMENT_FILE).is_file():
        raise ConfigError(f"{str(out)!r} is not an experiment folder (no {EXPERIMENT_FILE}); give the folder "
                          "`slimkit run` printed, e.g. runs/<experiment name>.")
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").is_file() else {}
    exp = load_experiment(out / EXPERIMENT_FILE, bool(run.get("automatic", True)))
    return finish(out, exp, quiet=quiet, store=folder_store(out, storage))
