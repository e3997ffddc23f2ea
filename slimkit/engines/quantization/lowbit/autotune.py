"""Choose the fastest of several equivalent ways to run an op by measuring each once per key and process.

A key names what the speed depends on (device, layer shape, dtype, a bucket of row counts); the first call with a
key times every candidate and the winner is remembered for the rest of the process (:class:`Chooser`). The timer
is injectable: :func:`cuda_event_timer` on a GPU (CUDA events around back-to-back calls, warm-up first, median
of repeats), fake timings in tests.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Mapping

import torch

#: ``timer(name, fn) -> seconds per call of fn`` (smaller is faster; ``name`` is the candidate's, for fake timers)
Timer = Callable[[str, Callable[[], object]], float]


def row_bucket(rows: int) -> int:
    """The power of two at or above ``rows`` (1 for 0 or 1): row counts in one bucket share a decision."""
    return 1 << max(rows - 1, 0).bit_length()


def cuda_event_timer(name: str, fn: Callable[[], object], warmup: int = 3, calls: int = 10,
                     repeats: int = 5) -> float:
    """Median seconds per call of ``fn`` on the current CUDA stream (``name`` is unused here).

    ``warmup`` calls first (compiles, caches), then ``repeats`` timings of ``calls`` back-to-back calls between
    two CUDA events.

    Back-to-back calls include what a caller pays in eager mode: launch overhead hides behind GPU work only where
    the kernel is longer than the launch.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


class Chooser:
    """Per-process table of measured decisions: ``key -> name of the fastest candidate``.

    ``timings[key]`` keeps what was measured (seconds per call; ``inf`` for a candidate that raised), so a
    benchmark or a test can show why a path won.
    """

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self.decisions: dict[Hashable, str] = {}
        self.timings: dict[Hashable, dict[str, float]] = {}

    def choose(self, key: Hashable, candidates: Mapping[str, Callable[[], object]]) -> str:
        """The remembered winner for ``key``, or time every candidate now and remember the fastest.

        Raises a ValueError when there is no candidate, or every candidate failed.
        """
        if key in self.decisions:
            return self.decisions[key]
        if not candidates:
            raise ValueError(f"no candidate to choose from for {key!r}.")
        if len(candidates) == 1:  # nothing to compare: no timing
            (name,) = candidates
            self.decisions[key], self.timings[key] = name, {}
            return name
        times = {}
        for name, fn in candidates.items():
            try:
                times[name] = float(self.timer(name, fn))
            except Exception:  # noqa: BLE001 - a kernel this device cannot compile or run loses, whatever it raised
                times[name] = math.inf
        best = min(times, key=times.__getitem__)
        if math.isinf(times[best]):
            raise ValueError(f"every candidate failed for {key!r}: {', '.join(times)}.")
        self.decisions[key], self.timings[key] = best, times
        return best
