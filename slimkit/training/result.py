"""What a training run reports (:class:`FitResult`) and the early-stopping bookkeeping behind it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from slimkit.errors import ConfigError, check_number

#: Directions a metric can improve in.
MODES: tuple[str, ...] = ("max", "min")


@dataclass
class FitResult:
    """The record of one :func:`~slimkit.training.fit` run.

    ``steps``: optimizer steps taken. ``epochs``: epochs begun (the last may be partial when ``steps`` or
    early stopping ended it). ``losses``: the training loss of every step. ``metrics``: ``(step, value)`` of
    every evaluation. ``best_metric`` / ``best_step``: the best evaluation and the step it was taken after
    (None without ``eval_fn``). ``stopped_early``: whether early stopping ended the run.
    """

    steps: int = 0
    epochs: int = 0
    losses: list[float] = field(default_factory=list)
    metrics: list[tuple[int, float]] = field(default_factory=list)
    best_metric: float | None = None
    best_step: int | None = None
    stopped_early: bool = False

    @property
    def final_loss(self) -> float:
        """The loss of the last step (NaN when no step ran)."""
        return self.losses[-1] if self.losses else math.nan

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields plus ``final_loss``."""
        return {**asdict(self), "final_loss": self.final_loss}


class EarlyStopping:
    """Tracks the best metric; says stop after ``patience`` evaluations in a row without an improvement.

    An evaluation improves when it beats the best so far by more than ``min_delta`` in the direction of
    ``mode`` (``"max"``: higher is better, ``"min"``: lower). ``patience=None`` never stops.
    """

    def __init__(self, mode: str = "max", patience: int | None = None, min_delta: float = 0.0) -> None:
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)} (the direction the metric improves in), "
                              f"got {mode!r}.")
        if patience is not None and (isinstance(patience, bool) or not isinstance(patience, int) or patience < 1):
            raise ConfigError(f"patience must be an integer >= 1 (evaluations without improvement) or None, "
                              f"got {patience!r}.")
        self.mode, self.patience, self.min_delta = mode, patience, check_number("min_delta", min_delta, 0)
        self.best: float | None = None
        self.best_step: int | None = None
        self.bad_evaluations = 0

    def update(self, step: int, value: float) -> bool:
        """Record the metric measured after ``step``; returns whether it is a new best."""
        if not math.isfinite(value):
            raise ConfigError(f"eval_fn returned {value!r} after step {step}; it must return a finite number.")
        sign = 1.0 if self.mode == "max" else -1.0
        if self.best is None or sign * (value - self.best) > self.min_delta:
            self.best, self.best_step, self.bad_evaluations = value, step, 0
            return True
        self.bad_evaluations += 1
        return False

    @property
    def should_stop(self) -> bool:
        """Whether ``patience`` evaluations in a row brought no improvement."""
        return self.patience is not None and self.bad_evaluations >= self.patience
