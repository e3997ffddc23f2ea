"""The Optuna side of an experiment: the study and its storage, the sampler a proposer names, trial counting.

The study lives in ``<experiment folder>/study.journal`` (Optuna's ``JournalStorage`` with a file backend,
safe for several local processes) or in a database several machines share (``storage.Store``).
Proposers map to Optuna's samplers: ``random`` -> ``RandomSampler``,
``sequence``/``grid`` -> ``GridSampler``, ``tpe``/``hyperopt`` -> ``TPESampler``, ``cmaes`` -> ``CmaEsSampler``,
``nsga2`` -> ``NSGAIISampler``, ``spearmint`` -> ``GPSampler``; ``hyperband`` and ``bohb`` add Optuna's
``HyperbandPruner`` (see :mod:`slimkit.experiment.proposers`); ``early_stop`` turns on Optuna's ``MedianPruner``
or the pruner of its ``aup_policy`` (:mod:`slimkit.experiment.early_stop`).
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from pathlib import Path
from typing import Any

from slimkit.errors import ConfigError, MissingPackageError
from slimkit.experiment.experiment_file import Experiment
from slimkit.experiment.proposers import MULTI_FIDELITY

try:
    import optuna
    from optuna.trial import FrozenTrial, TrialState
except ImportError as _exc:  # pragma: no cover - the experiment extra is missing
    raise MissingPackageError("Running experiments needs Optuna, which is not installed; install it with "
                              "`pip install 'slimkit[experiment]'` (or `pip install optuna`).") from _exc

from slimkit.experiment.pruners import policy_pruner
from slimkit.experiment.storage import Store, redact

STOP_FILE = "STOP"
#: study user attribute that stops every worker (set when a trial fails and job_failure.ignore_fail is false)
STOP_ATTR = "stop"
#: seconds a worker waits before looking again while other workers' trials finish
POLL_SECONDS = 1.0
#: trial user attribute marking a trial whose runner was killed (not counted; its parameters are re-run)
INTERRUPTED = "interrupted"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def folder_store(folder: Path, url: str | None = None) -> Store:
    """The storage an experiment folder's study lives in (``run.json`` records it; ``url`` overrides)."""
    run = folder / "run.json"
    spec = dict(json.loads(run.read_text()).get("storage") or {}) if run.is_file() else {}
    if url is not None:
        spec["url"] = url
    if spec.get("url") and spec["url"] != redact(spec["url"]) and url is None:
        raise ConfigError(f"The study of {folder} is in {spec['url']}; give the URL with its password "
                          "(--storage URL) or set PGPASSWORD.")
    return Store(**spec) if spec.get("url") else Store()


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


def worker_seed(random_seed: int, offset: int) -> int:
    """The seed of the worker ``offset`` of a study seeded ``random_seed`` (worker 0: the seed itself).

    Other workers hash the pair, so the workers of seeds 0 and 1 never share a seed (with ``seed + offset``,
    seed 0's second worker proposed exactly what seed 1's first did).
    """
    if offset == 0:
        return random_seed
    return int.from_bytes(hashlib.sha256(f"{random_seed}:{offset}".encode()).digest()[:4], "big") & 0x7FFFFFFF


def make_sampler(exp: Experiment, offset: int = 0) -> optuna.samplers.BaseSampler:
    """The Optuna sampler of the experiment's proposer, seeded with ``random_seed + offset``."""
    seed = None if exp.random_seed is None else worker_seed(exp.random_seed, offset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)  # TPE's gamma (bohb's top_n_percent) is deprecated, still works
        if exp.proposer == "random" or not exp.params:
            return optuna.samplers.RandomSampler(seed=seed)
        if exp.proposer in ("grid", "sequence"):
            return _AskTellGridSampler(grid_space(exp), seed=seed)
        if exp.proposer == "hyperopt" and exp.proposer_options.get("engine") == "random":
            return optuna.samplers.RandomSampler(seed=seed)  # Hyperopt's rand.suggest
        if exp.proposer in ("tpe", "hyperopt"):
            startup = min(10, max(2, exp.n_samples // 3))
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True, group=True)
        if exp.proposer == "cmaes":
            return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=min(5, max(1, exp.n_samples // 4)))
        if exp.proposer in ("hyperband", "bohb", "spearmint"):
            return _auptimizer_sampler(exp, seed)
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(50, exp.n_samples // 3)))


def _auptimizer_sampler(exp: Experiment, seed: int | None) -> optuna.samplers.BaseSampler:
    """The sampler of ``hyperband`` (its ``engine``), ``bohb`` (TPE with BOHB's settings), ``spearmint`` (GP)."""
    options = exp.proposer_options
    if exp.proposer == "hyperband":
        if options["engine"] == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(2, exp.n_samples // 3)))
    if exp.proposer == "bohb":
        startup = options["min_points_in_model"] or min(10, max(2, exp.n_samples // 3))
        share = options["top_n_percent"] / 100.0
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, n_ei_candidates=options["num_samples"],
                                          gamma=lambda n: max(1, math.ceil(share * n)), multivariate=True)
    return optuna.samplers.GPSampler(seed=seed, n_startup_trials=min(10, max(2, exp.n_samples // 3)))


def make_pruner(exp: Experiment) -> optuna.pruners.BasePruner:
    """The early-stopping policy's pruner, else Hyperband for ``hyperband``/``bohb``, else none.

    An ``early_stop`` object (Auptimizer's ``aup_policy``) wins over the proposer's Hyperband pruner: the file
    asked for that rule; ``early_stop: true`` is Optuna's median pruner.
    """
    policy = exp.early_stop_policy
    if policy is not None and (policy.get("startup_trials") == 1 or exp.proposer not in MULTI_FIDELITY):
        return policy_pruner(policy)
    if exp.proposer in MULTI_FIDELITY:
        options = exp.proposer_options
        if exp.proposer == "hyperband":
            low, high = 1, options["max_iter"]
        else:  # whole-number budgets are steps; fractions of a run leave the range to the first finished trial
            whole = all(float(options[k]).is_integer() and options[k] >= 1 for k in ("min_budget", "max_budget"))
            low, high = (int(options["min_budget"]), int(options["max_budget"])) if whole else (1, "auto")
        return optuna.pruners.HyperbandPruner(min_resource=low, max_resource=high,
                                              reduction_factor=options["eta"])
    return optuna.pruners.NopPruner()


def open_study(folder: Path, exp: Experiment, offset: int = 0, store: Store | None = None) -> optuna.Study:
    """Create or load the experiment's study with this process's sampler (``store``: default the folder's)."""
    store = store or folder_store(folder)
    return optuna.create_study(study_name=store.study_name(exp.name), storage=store.open(folder),
                               directions=exp.directions, sampler=make_sampler(exp, offset), pruner=make_pruner(exp),
                               load_if_exists=True)


def trial_id(study: optuna.Study, number: int) -> int:
    """The storage's id of trial ``number`` of ``study``."""
    store = study._storage  # Optuna keeps the storage here; there is no public accessor
    return store.get_trial_id_from_study_id_trial_number(store.get_study_id_from_name(study.study_name), number)


def interrupted(trials: list[FrozenTrial]) -> set[int]:
    """Numbers of trials cut short by a dead runner or worker (their parameters were queued again).

    A killed local runner's trials carry the ``interrupted`` attribute; a dead worker's stale trial (heartbeat
    storage) is named in the ``retry_history`` of the trial Optuna's retry callback queued in its place.
    """
    out = {t.number for t in trials if t.user_attrs.get(INTERRUPTED)}
    for t in trials:
        out.update(t.system_attrs.get("retry_history", ()))
    return out


def finished(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that ran to an end (complete, pruned or failed), not interrupted ones."""
    cut = interrupted(trials)
    return [t for t in trials if t.state in FINISHED and t.number not in cut]


def n_counted(trials: list[FrozenTrial]) -> int:
    """How many trials count towards ``n_samples``: finished ones and running ones."""
    return len(finished(trials)) + sum(t.state == TrialState.RUNNING for t in trials)


def recover_interrupted(folder: Path, study: optuna.Study) -> list[int]:
    """Mark trials left RUNNING by a killed runner as failed + interrupted and queue their parameters again.

    Only for the journal file: in a shared database other machines' trials run, and heartbeats find dead ones.
    """
    store = study._storage
    numbers = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial_id_ = trial_id(study, trial.number)
        store.set_trial_user_attr(trial_id_, INTERRUPTED, True)
        store.set_trial_state_values(trial_id_, TrialState.FAIL)
        if trial.params:
            study.enqueue_trial(trial.params, skip_if_exists=False)
        numbers.append(trial.number)
    return numbers


def kept_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The best trial (one objective) or the Pareto set (several): Optuna's ``best_trials``, interrupted excluded."""
    if not any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
        return []
    return sorted(study.best_trials, key=lambda t: t.number)
