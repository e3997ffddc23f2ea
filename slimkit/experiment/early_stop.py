"""``resource_args.early_stop``: Auptimizer's early-stopping policies as Optuna pruners.

``"early_stop": true`` is Optuna's ``MedianPruner`` (after two finished trials). This module checks the policy
(no Optuna needed to read a file); :mod:`slimkit.experiment.pruners` builds its pruner. Auptimizer's object form
names a policy::

    "resource_args": {"early_stop": {"aup_policy": "median", "aup_policy_steps": 5, "warmup": 2}}

=============== ====================================================== ==========================================
aup_policy      Optuna pruner                                          the policy's own fields (defaults)
=============== ====================================================== ==========================================
median          :class:`~slimkit.experiment.median.                    --
                RunningAverageMedianPruner` (Auptimizer's rule): stop
                a trial whose running average is behind the median
                of the other trials' running averages
bandit          ``SuccessiveHalvingPruner`` with reduction factor      ``bandit_factor`` (0.5; higher cuts more)
                ``max(2, round(1 / (1 - bandit_factor)))``: keep the
                best ``1 / factor`` of the trials at each rung
truncation      ``PercentilePruner`` keeping the top                   ``truncation_percentage`` (0.3: the
                ``100 * (1 - truncation_percentage)`` percent          worst 30 % stop)
curve_fitting   :class:`~slimkit.experiment.curve_fitting.             ``curve_fitting_max_iters`` (required: the
                CurveFittingPruner` (slimkit's own): extrapolate the   steps a full trial reports),
                curve, stop when it cannot reach ``threshold * best``  ``curve_fitting_threshold`` (0.95),
                                                                       ``curve_fitting_timeout`` (accepted: the
                                                                       fit takes milliseconds)
=============== ====================================================== ==========================================

``aup_policy_steps`` (required, as in Auptimizer) is how often (in steps) a trial is checked; ``warmup`` (0) how
many steps run before any check. The values come from the script: each ``print_result(value)`` before the last
is a step (Auptimizer's way), or ``print_result(value, step=k)`` names the step itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slimkit.errors import ConfigError
from slimkit.experiment.space import bounded, ranked

POLICIES = ("median", "bandit", "truncation", "curve_fitting")
COMMON = ("aup_policy", "aup_policy_steps", "warmup")
POLICY_FIELDS = {"median": (), "bandit": ("bandit_factor",), "truncation": ("truncation_percentage",),
                 "curve_fitting": ("curve_fitting_max_iters", "curve_fitting_threshold", "curve_fitting_timeout")}


def _number(raw: Mapping[str, Any], key: str, default: Any, low: float, high: float | None = None,
            integer: bool = False, open_low: bool = False) -> Any:
    return bounded(raw.get(key, default), f"resource_args.early_stop.{key}", low, high, integer=integer,
                   open_low=open_low, must=False)


def parse_early_stop(value: Any) -> dict[str, Any] | None:
    """``None`` (no early stopping), ``{"aup_policy": "median", ...}`` for ``true``, or the checked policy."""
    if value is None or value is False:
        return None
    if value is True:
        return {"aup_policy": "median", "aup_policy_steps": 1, "warmup": 0, "startup_trials": 2,
                "running_average": False}
    if not isinstance(value, Mapping):
        raise ConfigError(f"resource_args.early_stop: true, or a policy such as {{\"aup_policy\": \"median\", "
                          f"\"aup_policy_steps\": 5}}; got {value!r}.")
    policy = value.get("aup_policy")
    if policy not in POLICIES:
        raise ConfigError(f"resource_args.early_stop.aup_policy: {policy!r} is not a policy; use one of (closest "
                          f"first): {', '.join(ranked(str(policy), POLICIES))}.")
    allowed = (*COMMON, *POLICY_FIELDS[policy])
    for key in value:
        if key not in allowed:
            owner = next((p for p, fields in POLICY_FIELDS.items() if key in fields), None)
            hint = (f"it belongs to the {owner!r} policy" if owner else
                    f"valid fields (closest first): {', '.join(ranked(str(key), allowed))}")
            raise ConfigError(f"resource_args.early_stop.{key}: not a field of the {policy!r} policy; {hint}.")
    if "aup_policy_steps" not in value:
        raise ConfigError("resource_args.early_stop.aup_policy_steps: missing; how often (in steps) a trial is "
                          "compared with the others, e.g. 1.")
    out = {"aup_policy": policy, "aup_policy_steps": _number(value, "aup_policy_steps", 1, 1, integer=True),
           "warmup": _number(value, "warmup", 0, 0, integer=True), "startup_trials": 1}
    if policy == "bandit":
        out["bandit_factor"] = _number(value, "bandit_factor", 0.5, 0, 1, open_low=True)
        if out["bandit_factor"] >= 1:
            raise ConfigError("resource_args.early_stop.bandit_factor: below 1 (1 would stop every trial); got "
                              f"{out['bandit_factor']!r}.")
    elif policy == "truncation":
        out["truncation_percentage"] = _number(value, "truncation_percentage", 0.3, 0, 1)
    elif policy == "curve_fitting":
        if "curve_fitting_max_iters" not in value:
            raise ConfigError("resource_args.early_stop.curve_fitting_max_iters: missing; the number of "
                              "intermediate results a full trial reports (the step the curve is extrapolated to).")
        out["curve_fitting_max_iters"] = _number(value, "curve_fitting_max_iters", None, 1, integer=True)
        out["curve_fitting_threshold"] = _number(value, "curve_fitting_threshold", 0.95, 0, 1, open_low=True)
        out["curve_fitting_timeout"] = _number(value, "curve_fitting_timeout", 60, 0, open_low=True)
    return out
