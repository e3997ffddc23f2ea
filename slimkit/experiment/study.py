"""The Optuna side of an experiment: the journal-file storage, the sampler a proposer names, trial counting.

The study lives in ``<experiment folder>/study.journal`` (Optuna's ``JournalStorage`` with a file backend,
safe for several local processes). Proposers map to Optuna's samplers: ``random`` -> ``RandomSampler``,
``sequence``/``grid`` -> ``GridSampler``, ``tpe``/``hyperopt`` -> ``TPESampler``, ``cmaes`` -> ``CmaEsSampler``,
``nsga2`` -> ``NSGAIISampler``; ``early_stop`` turns on Optuna's ``MedianPruner``.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slimkit.errors import MissingPackageError
from slimkit.experiment.experiment_file import Experiment

try:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import FrozenTrial, TrialState
except ImportError as _exc:  # pragma: no cover - the experiment extra is missing
    raise MissingPackageError("Running experiments needs Optuna, which is not installed; install it with "
                              "`pip install 'slimkit[experiment]'` (or `pip install optuna`).") from _exc

STUDY_NAME = "slimkit"
JOURNAL = "study.journal"
#: trial user attribute marking a trial whose runner was killed (not counted; its parameters are re-run)
INTERRUPTED = "interrupted"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def storage(folder: Path) -> JournalStorage:
    """The study storage of an experiment folder (created on first use)."""
    return JournalStorage(JournalFileBackend(str(folder / JOURNAL)))


def grid_space(exp: Experiment) -> dict[str, list[Any]]:
    """``{parameter: values}`` of a grid experiment."""
    return {p.name: p.grid() or [] for p in exp.params}


def grid_size(exp: Experiment) -> int:
    """How many points the grid has (1 when nothing is searched)."""
    return math.prod(len(v) for v in grid_space(exp).values()) if exp.params else 1


class _AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's GridSampler for ask/tell use: the runner caps n_samples at the grid size itself.

    (GridSampler calls ``study.stop()`` after the last point, which Optuna allows only inside ``optimize``.)
    """

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Any) -> None:
        """Do nothing after a trial (no ``study.stop()``)."""


def make_sampler(exp: Experiment, offset: int = 0) -> optuna.samplers.BaseSampler:
    """The Optuna sampler of the experiment's proposer, seeded with ``random_seed + offset``."""
    seed = None if exp.random_seed is None else exp.random_seed + offset
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if exp.proposer == "random" or not exp.params:
            return optuna.samplers.RandomSampler(seed=seed)
        if exp.proposer in ("grid", "sequence"):
            return _AskTellGridSampler(grid_space(exp), seed=seed)
        if exp.proposer in ("tpe", "hyperopt"):
            startup = min(10, max(2, exp.n_samples // 3))
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True, group=True)
        if exp.proposer == "cmaes":
            return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=min(5, max(1, exp.n_samples // 4)))
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(50, exp.n_samples // 3)))


def make_pruner(exp: Experiment) -> optuna.pruners.BasePruner:
    """Optuna's median pruner with ``early_stop``, else none."""
    if exp.early_stop:
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    return optuna.pruners.NopPruner()


def open_study(folder: Path, exp: Experiment, offset: int = 0) -> optuna.Study:
    """Create or load the experiment's study with this process's sampler."""
    return optuna.create_study(study_name=STUDY_NAME, storage=storage(folder), directions=exp.directions,
                               sampler=make_sampler(exp, offset), pruner=make_pruner(exp), load_if_exists=True)


def counted(trial: FrozenTrial) -> bool:
    """Whether a trial counts towards ``n_samples`` (finished or running, not interrupted)."""
    return not trial.user_attrs.get(INTERRUPTED) and (trial.state in FINISHED or trial.state == TrialState.RUNNING)


def finished(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that ran to an end (complete, pruned or failed), not interrupted ones."""
    return [t for t in trials if t.state in FINISHED and not t.user_attrs.get(INTERRUPTED)]


@contextlib.contextmanager
def file_lock(path: Path, blocking: bool = True) -> Iterator[bool]:
    """An exclusive ``flock`` on ``path`` (released when the process dies); yields False if not blocking and held."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def recover_interrupted(folder: Path, study: optuna.Study) -> list[int]:
    """Mark trials left RUNNING by a killed runner as failed + interrupted and queue their parameters again."""
    store = storage(folder)
    numbers = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial_id = store.get_trial_id_from_study_id_trial_number(store.get_study_id_from_name(STUDY_NAME),
                                                                 trial.number)
        store.set_trial_user_attr(trial_id, INTERRUPTED, True)
        store.set_trial_state_values(trial_id, TrialState.FAIL)
        if trial.params:
            study.enqueue_trial(trial.params, skip_if_exists=False)
        numbers.append(trial.number)
    return numbers


def kept_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The best trial (one objective) or the Pareto set (several): Optuna's ``best_trials``, interrupted excluded."""
    if not any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
        return []
    return sorted(study.best_trials, key=lambda t: t.number)
