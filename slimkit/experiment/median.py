"""The ``median`` early-stopping policy as Auptimizer documents it: running averages against their median.

Auptimizer stops a job "whose results are worse than the median of the running average of results of all jobs
up to the same epoch": at a checked step ``s`` the trial's own running average (the mean of its first ``s``
values) is compared with the median of the other trials' running averages over their first ``s`` values. The
other trials are the finished ones and those still running that have reached step ``s`` (stopped trials are left
out, as Auptimizer leaves its early-stopped jobs out). A check needs one such trial at least.

Optuna's ``MedianPruner`` differs twice: it compares the trial's *best* value so far (optimistic on a noisy
curve) with the median of the finished trials' values *at* step ``s``, and it counts its interval from the
warm-up step rather than from step 0. Checked steps here are Auptimizer's: every ``interval`` steps
(``aup_policy_steps``), once ``warmup`` values are in.
"""

from __future__ import annotations

import math
import statistics

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState


def running_average(trial: FrozenTrial, steps: int) -> float | None:
    """The mean of ``trial``'s first ``steps`` intermediate values (in step order); None with fewer values."""
    values = [trial.intermediate_values[s] for s in sorted(trial.intermediate_values)[:steps]]
    return statistics.fmean(values) if len(values) == steps else None


class RunningAverageMedianPruner(optuna.pruners.BasePruner):
    """Stop a trial whose running average is worse than the median of the other trials' (module docstring).

    ``interval``: check every ``interval`` reported values (Auptimizer's ``aup_policy_steps``); ``warmup``: no
    check before that many values are in.
    """

    def __init__(self, interval: int = 1, warmup: int = 0) -> None:
        if interval < 1 or warmup < 0:
            raise ValueError(f"RunningAverageMedianPruner: interval >= 1 and warmup >= 0; got {interval}, {warmup}.")
        self.interval, self.warmup = interval, warmup

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """Whether ``trial`` should stop now."""
        steps = len(trial.intermediate_values)
        if steps < max(1, self.warmup) or steps % self.interval:
            return False
        own = running_average(trial, steps)
        others = [running_average(t, steps) for t in study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)) if t.number != trial.number]
        others = [v for v in others if v is not None and math.isfinite(v)]
        if not others:
            return False
        if own is None or math.isnan(own):
            return True
        median = statistics.median(others)
        return own < median if study.direction == StudyDirection.MAXIMIZE else own > median
