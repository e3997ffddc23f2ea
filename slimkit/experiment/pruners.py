"""The Optuna pruner of an experiment's early-stopping policy (the table in :mod:`slimkit.experiment.early_stop`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna

from slimkit.experiment.curve_fitting import CurveFittingPruner
from slimkit.experiment.median import RunningAverageMedianPruner


def bandit_reduction_factor(bandit_factor: float) -> int:
    """Successive halving's reduction factor for Auptimizer's ``bandit_factor`` (0.5 -> 2, 2/3 -> 3, 0.9 -> 10)."""
    return max(2, round(1.0 / (1.0 - bandit_factor)))


def policy_pruner(policy: Mapping[str, Any]) -> optuna.pruners.BasePruner:
    """The Optuna pruner of a checked early-stopping policy (see the module docstring)."""
    steps, warmup = policy["aup_policy_steps"], policy["warmup"]
    name = policy["aup_policy"]
    if name == "median" and policy.get("running_average", True):
        return RunningAverageMedianPruner(interval=steps, warmup=warmup)
    if name == "median":  # ``"early_stop": true``: Optuna's own median rule
        return optuna.pruners.MedianPruner(n_startup_trials=policy.get("startup_trials", 1), n_warmup_steps=warmup,
                                           interval_steps=steps)
    if name == "bandit":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(steps, warmup, 1),
                                                      reduction_factor=bandit_reduction_factor(
                                                          policy["bandit_factor"]))
    if name == "truncation":
        keep = 100.0 * (1.0 - policy["truncation_percentage"])
        return optuna.pruners.PercentilePruner(keep, n_startup_trials=1, n_warmup_steps=warmup, interval_steps=steps)
    return CurveFittingPruner(policy["curve_fitting_max_iters"], policy["curve_fitting_threshold"], warmup, steps)
