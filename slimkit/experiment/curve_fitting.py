"""The ``curve_fitting`` early-stopping policy: extrapolate a trial's learning curve, stop it when it cannot win.

Optuna has no learning-curve pruner, so this is one. At each check the trial's intermediate values
``y(1..t)`` are fitted by two saturating curve families, each linear in its coefficients once one shape
parameter is fixed (a grid over that parameter, refined by a finer grid around the best, with the coefficients'
least squares solved in closed form for the whole grid at once: well under a millisecond a check, so checking
every step of every trial costs the runner nothing noticeable):

* power law ``y = c - a * x**(-alpha)`` with ``alpha >= 0.3`` (flatter power laws grow like a logarithm, with no
  ceiling, and overshoot),
* exponential ``y = c - a * exp(-b * x)``.

The families are combined with weights ``1 / (squared error on the last quarter of the curve when fitted on the
rest)**2``: the ones that extrapolated best so far count most. The combined curve at ``max_iters`` is the
predicted final value (:func:`predict_final`).

The pruner decides on the most favourable of the families' extrapolations instead (``optimistic=True``): as
Auptimizer's policy does, the trial is stopped when the prediction (read as "higher is better", values negated
for ``target: min``) falls below ``threshold * best`` (``2 - threshold`` when the best is negative), ``best``
being the best final value of the trials finished so far, but here only when *every* family says so. From three
points on, a clearly bad curve is stopped at once (every family lands far below), while a good curve that is still
rising is not stopped on a fit that bends it over too early: a 3- or 4-point fit of a saturating curve often
underestimates it, and Auptimizer avoids that by fitting no curve before step 5, which lets the bad trials run
two steps more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

#: a curve is extrapolated from this many points at least
MIN_POINTS = 3
#: shape grids: power-law exponents (below ~0.3 a power law grows like a logarithm, without a ceiling) and
#: exponential rates (per step, over the curve's length)
_ALPHAS = {"pow": np.geomspace(0.3, 4.0, 20), "exp": np.geomspace(0.05, 4.0, 24)}


def _fits(x: np.ndarray, y: np.ndarray, family: str, shapes: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(squared errors, coef0, coef1)`` of the fits ``y ~ coef0 + coef1 * basis(x, shape)``, all shapes at once.

    Two coefficients: the normal equations solved in closed form for every shape together (a fraction of a
    millisecond for a whole grid); a degenerate shape (a basis constant over ``x``) gets an infinite error.
    """
    basis = x[None, :] ** (-shapes[:, None]) if family == "pow" else np.exp(-shapes[:, None] * x[None, :])
    n, sy = float(len(x)), float(y.sum())
    sb, sbb, sby = basis.sum(1), (basis * basis).sum(1), basis @ y
    det = n * sbb - sb * sb
    with np.errstate(divide="ignore", invalid="ignore"):
        coef1 = (n * sby - sb * sy) / det
        coef0 = (sy - coef1 * sb) / n
        errors = ((coef0[:, None] + coef1[:, None] * basis - y[None, :]) ** 2).sum(1)
    errors[~np.isfinite(errors) | (np.abs(det) <= 1e-12 * n * np.maximum(sbb, 1e-300))] = np.inf
    return errors, coef0, coef1


def _fit_family(x: np.ndarray, y: np.ndarray, family: str) -> tuple[float, float, float]:
    """Least-squares fit of one family: ``(coef0, coef1, shape)``; the shape by a grid, then a finer grid around it."""
    scale = x.max() if family == "exp" else 1.0
    shapes = _ALPHAS[family] / scale
    errors, _, _ = _fits(x, y, family, shapes)
    i = int(np.argmin(errors))
    fine = np.geomspace(shapes[max(0, i - 1)], shapes[min(len(shapes) - 1, i + 1)], 64)
    errors, coef0, coef1 = _fits(x, y, family, fine)
    j = int(np.argmin(errors))
    return float(coef0[j]), float(coef1[j]), float(fine[j])


def _evaluate(params: tuple[float, float, float], family: str, x: float) -> float:
    c0, c1, shape = params
    return c0 + c1 * (x ** (-shape) if family == "pow" else math.exp(-shape * x))


def predict_final(values: Sequence[float], max_iters: int, optimistic: bool = False) -> float | None:
    """The value the curve ``values`` (at steps 1, 2, ...) is predicted to reach at step ``max_iters``.

    The families' predictions weighted by how well each extrapolated the curve's last quarter, or with
    ``optimistic`` the highest of them. None with fewer than :data:`MIN_POINTS` values or non-finite ones.
    Already at ``max_iters``: the last value.
    """
    y = np.asarray(values, dtype=float)
    if len(y) < MIN_POINTS or not np.all(np.isfinite(y)):
        return None
    if len(y) >= max_iters:
        return float(y[-1])
    x = np.arange(1, len(y) + 1, dtype=float)
    held = max(1, len(y) // 4)
    predictions, weights = [], []
    for family in ("pow", "exp"):
        full = _fit_family(x, y, family)
        head = _fit_family(x[:-held], y[:-held], family) if len(y) - held >= 2 else full
        error = sum((_evaluate(head, family, xi) - yi) ** 2 for xi, yi in zip(x[-held:], y[-held:], strict=True))
        final = _evaluate(full, family, float(max_iters))
        if math.isfinite(final):
            predictions.append(final)
            weights.append(1.0 / (error + 1e-12) ** 2)
    if not predictions:
        return float(y[-1])
    if optimistic:
        return float(max(predictions))
    return float(np.dot(predictions, weights) / np.sum(weights))


class CurveFittingPruner(optuna.pruners.BasePruner):
    """Prune a trial whose extrapolated final value (every family's) cannot reach ``threshold`` of the best's.

    ``max_iters``: the steps a full trial reports; ``threshold``: Auptimizer's ``curve_fitting_threshold``
    (0.95); ``warmup``: steps before any check; ``interval``: check every ``interval`` steps (Auptimizer's
    ``aup_policy_steps``).
    """

    def __init__(self, max_iters: int, threshold: float = 0.95, warmup: int = 0, interval: int = 1) -> None:
        if max_iters < 1 or not 0 < threshold <= 1 or warmup < 0 or interval < 1:
            raise ValueError(f"CurveFittingPruner: max_iters >= 1, 0 < threshold <= 1, warmup >= 0, interval >= 1; "
                             f"got {max_iters}, {threshold}, {warmup}, {interval}.")
        self.max_iters, self.threshold, self.warmup, self.interval = max_iters, threshold, warmup, interval

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """Whether ``trial`` should stop now (see the class docstring)."""
        steps = sorted(trial.intermediate_values)
        if len(steps) < max(MIN_POINTS, self.warmup) or len(steps) % self.interval:
            return False
        sign = 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0
        done = [t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if t.value is not None and math.isfinite(t.value)]
        if not done:
            return False
        predicted = predict_final([sign * trial.intermediate_values[s] for s in steps], self.max_iters,
                                  optimistic=True)
        if predicted is None:
            return False
        best = max(sign * v for v in done)
        factor = self.threshold if best > 0 else 2 - self.threshold
        return predicted < factor * best
