"""Run-time cost of a model: latency (warm-up, repeats, fixed threads), throughput and peak memory."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from slimkit.errors import check_int, check_number
from slimkit.utils import Inputs, model_device, move_inputs, run_model


@contextmanager
def set_threads(n: int) -> Iterator[None]:
    """Fix torch's intra-op thread count to ``n`` inside the block and restore the previous count after.

    Latency depends strongly on threads; every measurement states the count it used.
    """
    check_int("threads", n)
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """Put ``model`` in eval mode for the block and restore every submodule's training flag after."""
    if not isinstance(model, nn.Module):
        yield
        return
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in flags:
            module.training = training


def batch_size_of(inputs: Inputs) -> int:
    """Leading dimension of the first batched tensor in ``inputs`` (1 when there is none)."""
    if isinstance(inputs, Mapping):
        inputs = list(inputs.values())
    values = inputs if isinstance(inputs, (tuple, list)) else [inputs]
    return next((int(v.shape[0]) for v in values if isinstance(v, torch.Tensor) and v.dim() > 0), 1)


@dataclass
class Latency:
    """Wall-clock time of one forward, in milliseconds, with the settings it was measured under."""

    median_ms: float
    mean_ms: float
    p90_ms: float
    min_ms: float
    std_ms: float
    repeats: int
    warmup: int
    threads: int
    batch_size: int

    def throughput(self) -> float:
        """Items per second at the median latency (``batch_size`` items per forward)."""
        return self.batch_size * 1000.0 / self.median_ms if self.median_ms > 0 else math.inf

    def to_dict(self) -> dict[str, float]:
        """Plain dict of the fields plus throughput."""
        return {**asdict(self), "throughput": self.throughput()}

    @classmethod
    def from_samples(cls, samples_ms: list[float], *, warmup: int, threads: int, batch_size: int) -> Latency:
        """Summarise timing samples (median, mean, 90th percentile by linear interpolation, min, std)."""
        ordered = sorted(samples_ms)
        pos = 0.9 * (len(ordered) - 1)
        low = math.floor(pos)
        high = min(low + 1, len(ordered) - 1)
        p90 = ordered[low] + (ordered[high] - ordered[low]) * (pos - low)
        return cls(
            median_ms=statistics.median(ordered),
            mean_ms=statistics.fmean(ordered),
            p90_ms=p90,
            min_ms=ordered[0],
            std_ms=statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
            repeats=len(ordered),
            warmup=warmup,
            threads=threads,
            batch_size=batch_size,
        )


def fresh_inputs(inputs: Inputs, seed: int) -> Inputs:
    """``inputs`` with the positions of every token-id tensor shuffled by a ``seed``-ed permutation.

    Token-id tensors are integer tensors of two or more dimensions holding values above 1 (0/1 masks are left
    alone). Each seed gives new rows of the same shapes and vocabulary, so a cache keyed by exact inputs misses.
    """
    def shuffle(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and not value.is_floating_point() and value.dim() >= 2 \
                and value.numel() and int(value.max()) > 1:
            order = torch.randperm(value.shape[-1], generator=torch.Generator().manual_seed(seed))
            return value[..., order.to(value.device)]
        return value

    if isinstance(inputs, Mapping):
        return {k: shuffle(v) for k, v in inputs.items()}
    if isinstance(inputs, (tuple, list)):
        return type(inputs)(shuffle(v) for v in inputs)
    return shuffle(inputs)


class _Timer:
    """Times forwards of one model on its own copy of the inputs, synchronising CUDA around each call.

    With ``fresh`` every call gets a new variant of the inputs (:func:`fresh_inputs`, made outside the timing),
    the same sequence for every timer, so a model that caches repeated inputs is timed on the stream it would see.
    """

    def __init__(self, model: Any, inputs: Inputs, fresh: bool = False) -> None:
        self.model = model
        self.device = model_device(model)
        self.inputs = move_inputs(inputs, self.device)
        self.fresh, self.calls = fresh, 0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, n: int) -> list[float]:
        samples = []
        for _ in range(n):
            inputs = fresh_inputs(self.inputs, self.calls) if self.fresh else self.inputs
            self.calls += 1
            self._sync()
            start = time.perf_counter()
            run_model(self.model, inputs)
            self._sync()
            samples.append((time.perf_counter() - start) * 1000.0)
        return samples


def measure_latency(
    model: Any, inputs: Inputs, *, warmup: int = 3, repeats: int = 10, threads: int = 2, min_time_s: float = 0.0
) -> Latency:
    """Latency of one forward of ``model`` on ``inputs`` under ``torch.inference_mode`` at ``threads`` threads.

    Runs ``warmup`` untimed forwards, then timed ones until at least ``repeats`` samples and ``min_time_s``
    seconds of timed work are collected. CUDA is synchronised before and after every timed call.
    """
    check_int("warmup", warmup, 0)
    check_int("repeats", repeats)
    check_number("min_time_s", min_time_s, 0)
    timer = _Timer(model, inputs)
    with set_threads(threads), torch.inference_mode(), eval_mode(model):
        timer.run(warmup)
        samples = timer.run(repeats)
        while sum(samples) < min_time_s * 1000.0:
            samples += timer.run(1)
    return Latency.from_samples(samples, warmup=warmup, threads=threads, batch_size=batch_size_of(inputs))


def measure_latency_pair(
    base: Any, smashed: Any, inputs: Inputs, *, warmup: int = 3, repeats: int = 10, threads: int = 2, block: int = 2,
    fresh: bool = False,
) -> tuple[Latency, Latency]:
    """Latency of two models measured in alternating blocks (A B B A ...) so machine noise hits both alike.

    ``fresh=True`` times each call on new token rows (:func:`fresh_inputs`): the fair timing for a cacher.
    """
    check_int("warmup", warmup, 0)
    check_int("repeats", repeats)
    check_int("block", block)
    timers = (_Timer(base, inputs, fresh), _Timer(smashed, inputs, fresh))
    samples: tuple[list[float], list[float]] = ([], [])
    with set_threads(threads), torch.inference_mode(), eval_mode(base), eval_mode(smashed):
        for timer in timers:
            timer.run(warmup)
        while len(samples[0]) < repeats:  # every round but the last adds ``block`` samples: A B, then B A...
            n, rounds = min(block, repeats - len(samples[0])), len(samples[0]) // block
            for which in (0, 1) if rounds % 2 == 0 else (1, 0):
                samples[which].extend(timers[which].run(n))
    batch = batch_size_of(inputs)
    base_lat, smashed_lat = (Latency.from_samples(s, warmup=warmup, threads=threads, batch_size=batch) for s in samples)
    return base_lat, smashed_lat


def _cpu_peak_from_profile(prof: Any) -> int:
    """Highest running total of CPU allocations minus frees recorded by the profiler, in time order."""
    events: list[tuple[float, int]] = []
    kineto = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if kineto is not None and hasattr(kineto, "events"):
        for e in kineto.events():
            if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU:
                events.append((e.start_ns(), int(e.nbytes())))
    else:  # public API: per-op self allocations at op start, frees as [memory] events
        for e in prof.events():
            change = e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage
            if change:
                events.append((e.time_range.start, int(change)))
    running = peak = 0
    for _, change in sorted(events, key=lambda item: item[0]):
        running += change
        peak = max(peak, running)
    return peak


def input_bytes(inputs: Inputs) -> int:
    """Bytes of every tensor in ``inputs`` (nested mappings and sequences included)."""
    if isinstance(inputs, torch.Tensor):
        return inputs.numel() * inputs.element_size()
    values = inputs.values() if isinstance(inputs, Mapping) else inputs if isinstance(inputs, Sequence) else []
    return sum(input_bytes(v) for v in values if isinstance(v, (torch.Tensor, Mapping, list, tuple)))


def peak_memory(model: Any, inputs: Inputs) -> int:
    """Peak bytes in use during one forward: the model's weights + the inputs + the forward's peak working set.

    The working set (activations, temporaries, outputs) is measured, not estimated: on CUDA with the caching
    allocator's ``max_memory_allocated`` after a reset (minus what was allocated before the call); on CPU
    from ``torch.profiler``'s allocation/free events (``profile_memory=True``), replayed in time order.
    Weight bytes count quantized weights at their integer width (see ``size.state_bytes``), so the number is
    comparable between a model and its smashed version on either device.
    """

    def forward(m: nn.Module, x: Inputs) -> None:
        with torch.inference_mode(), eval_mode(m):
            run_model(m, x)

    return peak_bytes(model, inputs, forward)


def peak_bytes(model: Any, inputs: Inputs, step: Callable[[nn.Module, Inputs], Any]) -> int:
    """Peak bytes in use while ``step(model, inputs)`` runs: weights + inputs + the step's working set.

    The inputs are moved to the model's device first; the working set is measured as :func:`peak_memory` says.
    """
    from slimkit.evaluation.size import state_bytes

    device = model_device(model)
    inputs = move_inputs(inputs, device)
    resident = state_bytes(model) + input_bytes(inputs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step(model, inputs)
        torch.cuda.synchronize(device)
        working = torch.cuda.max_memory_allocated(device) - before
    else:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step(model, inputs)
        working = _cpu_peak_from_profile(prof)
    return resident + max(working, 0)
