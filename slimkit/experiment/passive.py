"""``"resource": "passive"``: the runner creates the study and waits while workers started elsewhere finish it.

Auptimizer's passive resource printed each job's command and waited for its result typed by hand; here the jobs
are ``slimkit worker EXPERIMENT --storage URL`` processes started on any machine (see
:mod:`slimkit.experiment.resources`), and the runner prints that command, follows the study and re-queues the
trial of a worker whose heartbeats stopped.
"""

from __future__ import annotations

import shlex
import sys
import time
import warnings
from pathlib import Path

import optuna

from slimkit.experiment.experiment_file import Experiment
from slimkit.experiment.report import progress_line
from slimkit.experiment.storage import Store, redact
from slimkit.experiment.study import POLL_SECONDS, STOP_ATTR, STOP_FILE, finished


def wait_for_workers(folder: Path, exp: Experiment, study: optuna.Study, store: Store, n_samples: int,
                     quiet: bool, saved_file: str) -> None:
    """``resource: passive``: run no job; wait until workers started elsewhere have finished ``n_samples`` trials.

    Ctrl-C stops the waiting (the study stays in the database and the workers carry on); the report then shows
    the trials finished so far. ``saved_file`` is the experiment file the folder keeps (for a dict experiment).
    """
    source = exp.path.resolve() if exp.path is not None else folder / saved_file
    command = f"slimkit worker {shlex.quote(str(source))} --storage {shlex.quote(redact(store.url or ''))}"
    if not quiet:
        print(f"slimkit: resource 'passive': this process runs no job. Start workers on any machines, at any time:\n"
              f"    {command}\n(with the password, or PGPASSWORD set; --output DIR for each worker's trial logs). "
              f"Waiting for {n_samples} finished trial(s); Ctrl-C stops waiting, the workers carry on.",
              file=sys.stderr, flush=True)
    last = ""
    try:
        while True:
            trials = study.get_trials(deepcopy=False)
            if ((folder / STOP_FILE).exists() or study.user_attrs.get(STOP_ATTR)
                    or len(finished(trials)) >= n_samples):
                return
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)  # a dead worker's trial is queued again for the others
            line = progress_line(exp, trials, n_samples)
            if line != last and not quiet:
                print(line, file=sys.stderr, flush=True)
                last = line
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        if not quiet:
            print(f"slimkit: stopped waiting; the study stays in {redact(store.url or '')} and its workers carry on "
                  f"(`slimkit report {folder} --storage URL` shows it later).", file=sys.stderr)
