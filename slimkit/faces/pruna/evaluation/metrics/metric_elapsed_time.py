"""Pruna's ``latency``, ``throughput`` and ``total_time``, from one timing run.

The run is slimkit's :func:`~slimkit.evaluation.measure_latency` on the datamodule's first test batch.

Pruna's meanings: ``latency`` is the mean milliseconds per batch over ``n_iterations`` timed forwards (after
``n_warmup_iterations`` untimed ones), ``total_time`` their sum, ``throughput`` samples per millisecond.
"""

from __future__ import annotations

from typing import Any

import torch

from slimkit.errors import ConfigError, check_int
from slimkit.evaluation.runtime import measure_latency
from slimkit.faces.pruna.evaluation.metrics.metric_base import SharedStats, first_inputs, resolve_device

LATENCY, THROUGHPUT, TOTAL_TIME = "latency", "throughput", "total_time"
TIMING_TYPES = ("sync", "async")


class InferenceTimeStats(SharedStats):
    """One timing run shared by :class:`LatencyMetric`, :class:`ThroughputMetric` and :class:`TotalTimeMetric`.

    ``timing_type="sync"`` synchronises CUDA around every timed forward (slimkit always does; ``"async"`` is
    accepted for Pruna's snippets and times the same way). Timing uses torch's current thread count.
    """

    def __init__(self, n_iterations: int = 100, n_warmup_iterations: int = 10, device: str | torch.device | None = None,
                 timing_type: str = "sync") -> None:
        self.n_iterations = check_int("n_iterations", n_iterations)
        self.n_warmup_iterations = check_int("n_warmup_iterations", n_warmup_iterations, 0)
        self.device = resolve_device(device)
        if timing_type not in TIMING_TYPES:
            raise ConfigError(f"timing_type must be one of {TIMING_TYPES}, got {timing_type!r}.")
        self.timing_type = timing_type

    def measure(self, model: Any, dataloader: Any) -> dict[str, float | int]:
        """``{"latency": ms per batch, "throughput": samples per ms, "total_time": ms}`` plus the settings."""
        inputs = first_inputs(dataloader, self.device)
        timing = measure_latency(model, inputs, warmup=self.n_warmup_iterations, repeats=self.n_iterations,
                                 threads=torch.get_num_threads())
        total = timing.mean_ms * timing.repeats
        return {LATENCY: timing.mean_ms, TOTAL_TIME: total,
                THROUGHPUT: timing.repeats * timing.batch_size / total if total > 0 else float("inf"),
                "median_ms": timing.median_ms, "threads": timing.threads, "batch_size": timing.batch_size,
                "repeats": timing.repeats}

    def notes(self, raw: dict[str, float | int]) -> list[str]:
        """The settings the time was measured under."""
        return [f"{raw['repeats']} timed forwards of a batch of {raw['batch_size']} at {raw['threads']} threads "
                f"(median {raw['median_ms']:.4g} ms)"]


class LatencyMetric(InferenceTimeStats):
    """Mean milliseconds per batch (Pruna's ``latency``)."""

    metric_name = LATENCY
    metric_units = "ms/batch"
    higher_is_better = False


class ThroughputMetric(InferenceTimeStats):
    """Samples per millisecond (Pruna's ``throughput``)."""

    metric_name = THROUGHPUT
    metric_units = "samples/ms"
    higher_is_better = True


class TotalTimeMetric(InferenceTimeStats):
    """Milliseconds of all ``n_iterations`` timed forwards together (Pruna's ``total_time``)."""

    metric_name = TOTAL_TIME
    metric_units = "ms"
    higher_is_better = False
