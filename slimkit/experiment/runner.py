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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from slimkit.core.io import write_json_atomic
from slimkit.errors import ConfigError
from slimkit.experiment.experiment_file import Experiment, load_experiment
from slimkit.experiment.jobs import JobOutcome, die_with_parent, run_script_job, run_smash_job
from slimkit.experiment.report import ExperimentResult, finish, progress_line
from slimkit.experiment.study import (
    counted,
    file_lock,
    finished,
    grid_size,
    open_study,
    recover_interrupted,
)

EXPERIMENT_FILE = "experiment.json"
STOP_FILE = "STOP"


def _suggest(exp: Experiment, trial: optuna.Trial) -> dict[str, Any]:
    if exp.smash_space is not None:
        return exp.smash_space.suggest(trial)
    return {p.name: p.suggest(trial) for p in exp.params}


def _run_trial(exp: Experiment, folder: Path, trial: optuna.Trial, bench: Any) -> JobOutcome:
    values = _suggest(exp, trial)
    trial_dir = folder / "trials" / f"{trial.number:04d}"
    trial.set_user_attr("trial_dir", str(trial_dir.relative_to(folder)))

    def on_intermediate(step: int, value: float) -> bool:
        if not exp.track_intermediate_results:
            return False
        trial.report(value, step)
        return exp.early_stop and trial.should_prune()

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


def work(folder: str | Path, automatic: bool, index: int, n_samples: int, echo: bool = False) -> None:
    """One worker: ask the study for trials until ``n_samples`` are counted, run each, tell the result."""
    if index:  # a spawned worker process
        die_with_parent()
    folder = Path(folder)
    exp = load_experiment(folder / EXPERIMENT_FILE, automatic)
    with file_lock(folder / "ask.lock"):
        offset = index + 1000 * len(open_study(folder, exp).get_trials(deepcopy=False))
    study = open_study(folder, exp, offset)
    bench = None
    if exp.model is not None:
        from slimkit.experiment.bench import Bench

        bench = Bench(exp.model, exp.objectives, exp.n_parallel, dict(exp.runtime_args))
    while not (folder / STOP_FILE).exists():
        with file_lock(folder / "ask.lock"):
            if sum(counted(t) for t in study.get_trials(deepcopy=False)) >= n_samples:
                break
            trial = study.ask()
        outcome = _run_trial(exp, folder, trial, bench)
        if outcome.state == "complete":
            study.tell(trial, outcome.values)
        else:
            study.tell(trial, state=TrialState.PRUNED if outcome.state == "pruned" else TrialState.FAIL)
        if outcome.state == "failed" and not exp.ignore_fail:
            (folder / STOP_FILE).write_text(f"trial {trial.number} failed and job_failure.ignore_fail is false\n")
        if echo:
            print(progress_line(exp, study.get_trials(deepcopy=False), n_samples), file=sys.stderr, flush=True)


def _prepare_folder(exp: Experiment, automatic: bool, folder: Path) -> dict[str, Any]:
    raw = {**exp.raw, "name": exp.name, "workingdir": str(exp.workingdir)}
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
    write_json_atomic(folder / "run.json", {"automatic": automatic, "source": str(exp.path or "")})
    (folder / STOP_FILE).unlink(missing_ok=True)
    return raw


def run_experiment(source: str | os.PathLike | Mapping[str, Any], automatic: bool = False,
                   folder: str | os.PathLike | None = None, quiet: bool = False) -> ExperimentResult:
    """Run an experiment file (or dict) once (one job) or, with ``automatic``, its search; return the results.

    Results go to ``folder`` (default ``<workingdir>/runs/<name>``): the Optuna journal, one folder per trial
    (``job.json``, ``log.txt``, ``model/``), ``results.csv``, ``results.json`` and PNG plots.
    """
    exp = load_experiment(source, automatic)
    out = Path(folder) if folder is not None else exp.default_folder()
    out.mkdir(parents=True, exist_ok=True)
    with file_lock(out / "runner.lock", blocking=False) as got:
        if not got:
            raise ConfigError(f"Another `slimkit run` is running the experiment in {out}; wait for it, or give this "
                              "run its own folder with --output.")
        _prepare_folder(exp, automatic, out)
        study = open_study(out, exp)
        interrupted = recover_interrupted(out, study)
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
            print(f"slimkit: {exp.name!r}: {mode}, folder {out}", file=sys.stderr)
            if done or interrupted:
                print(f"slimkit: resuming: {len(done)} finished trial(s) kept"
                      + (f", {len(interrupted)} interrupted trial(s) queued again" if interrupted else ""),
                      file=sys.stderr)
        workers = exp.n_parallel if automatic else 1
        if workers == 1:
            work(out, automatic, 0, n_samples, echo=not quiet)
        else:
            _run_workers(out, exp, automatic, workers, n_samples, quiet)
        return finish(out, exp, quiet=quiet)


def _run_workers(folder: Path, exp: Experiment, automatic: bool, workers: int, n_samples: int, quiet: bool) -> None:
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=work, args=(str(folder), automatic, i + 1, n_samples), daemon=False)
                 for i in range(workers)]
    for process in processes:
        process.start()
    study = open_study(folder, exp)
    last = ""
    try:
        while any(p.is_alive() for p in processes):
            time.sleep(1.0)
            line = progress_line(exp, study.get_trials(deepcopy=False), n_samples)
            if line != last and not quiet:
                print(line, file=sys.stderr, flush=True)
                last = line
    finally:
        for process in processes:
            process.join(timeout=0 if sys.exc_info()[0] else None)
            if process.is_alive():
                process.kill()
    crashed = [p.exitcode for p in processes if p.exitcode]
    if crashed and not quiet:
        print(f"slimkit: {len(crashed)} worker process(es) ended with status {crashed}; see the trial logs.",
              file=sys.stderr)



def report_experiment(folder: str | os.PathLike, quiet: bool = False) -> ExperimentResult:
    """Reprint the table and rewrite CSV, JSON and plots of an experiment folder (``slimkit report``)."""
    out = Path(folder)
    if not (out / EXPERIMENT_FILE).is_file():
        raise ConfigError(f"{str(out)!r} is not an experiment folder (no {EXPERIMENT_FILE}); give the folder "
                          "`slimkit run` printed, e.g. runs/<experiment name>.")
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").is_file() else {}
    exp = load_experiment(out / EXPERIMENT_FILE, bool(run.get("automatic", True)))
    return finish(out, exp, quiet=quiet)
