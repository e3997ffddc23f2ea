"""Iterative channel pruning on a schedule (MMRazor's ``ItePruneAlgorithm``): widths shrink every few steps.

``IterativeSchedule(target, full, step_freq, prune_times, linear_schedule)``: at steps ``0, step_freq, ...``
(``prune_times`` of them) each unit's choice moves from its full width towards its target -- linearly
(``k / prune_times`` of the way at the k-th time) or straight to the target (``linear_schedule=False``).
Choices are kept ratios (floats) or channel counts (ints), as in the target.
"""

from __future__ import annotations

from collections.abc import Mapping

from slimkit.errors import ConfigError, check_int

Choice = float | int


class IterativeSchedule:
    """When to prune and to which widths (see the module docstring)."""

    def __init__(self, target: Mapping[str, Choice], full: Mapping[str, Choice], step_freq: int = 1,
                 prune_times: int = 1, linear_schedule: bool = True) -> None:
        for name, value in (("step_freq", step_freq), ("prune_times", prune_times)):
            check_int(name, value)
        missing = sorted(set(target) - set(full))
        if missing:
            raise ConfigError(f"target names {missing[0]!r}, which is not a channel unit.")
        for name, value in target.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"target for {name!r} must be a kept ratio in (0, 1] or a channel count, got "
                                  f"{value!r}.")
        self.target, self.full = dict(target), dict(full)
        self.step_freq, self.prune_times, self.linear = step_freq, prune_times, bool(linear_schedule)

    def is_prune_time(self, iteration: int) -> bool:
        """Whether ``iteration`` (0-based training step) prunes."""
        return iteration % self.step_freq == 0 and iteration // self.step_freq < self.prune_times

    def prune_at(self, iteration: int) -> dict[str, Choice]:
        """The choices of every targeted unit at a prune time."""
        times = iteration // self.step_freq + 1
        if times > self.prune_times:
            raise ConfigError(f"step {iteration} is after the last prune time ({self.prune_times} times every "
                              f"{self.step_freq} steps).")
        ratio = times / self.prune_times
        out: dict[str, Choice] = {}
        for name, goal in self.target.items():
            start = self.full[name]
            value = (goal - start) * ratio + start if self.linear else goal
            out[name] = int(value) if isinstance(start, int) and not isinstance(start, bool) else float(value)
        return out
