"""Shared benchmark plumbing: interleaved timing of several models, machine description, result tables."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable

# Spinning OpenMP workers make 2-thread timings meaningless on a shared box; set before torch loads its runtime.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_isa() -> str:
    """The int8/bf16-relevant instruction sets this CPU has (speedups depend on them; state them with figures)."""
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return " ".join(f for f in wanted if f in flags) or "no avx2"
    except OSError:
        pass
    return "unknown ISA"


def machine_line(threads: int) -> str:
    return (f"{cpu_name()} [{cpu_isa()}], {threads} torch threads, torch {torch.__version__}, "
            f"python {platform.python_version()}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, "
            f"{time.strftime('%Y-%m-%d')}")


def interleaved_samples(fns: dict[str, Callable[[], object]], repeats: int, warmup: int,
                        threads: int) -> dict[str, list[float]]:
    """ms per call of each callable, ``repeats`` samples each, timed round-robin (alternating order) so machine
    noise hits all of them alike."""
    torch.set_num_threads(threads)
    samples: dict[str, list[float]] = {k: [] for k in fns}
    with torch.inference_mode():
        for _ in range(warmup):
            for fn in fns.values():
                fn()
        for r in range(repeats):
            order = list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))
            for name, fn in order:
                start = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - start) * 1000)
    return samples


def interleaved_latency(fns: dict[str, Callable[[], object]], repeats: int, warmup: int, threads: int) -> dict:
    """Median ms per callable, timing them round-robin so machine noise hits all of them alike."""
    return {k: statistics.median(v) for k, v in interleaved_samples(fns, repeats, warmup, threads).items()}


def job_seconds(jobs: list[dict[str, Callable[[], object]]], repeats: int) -> dict[str, float]:
    """Seconds each named arm spent over ``jobs`` (one dict of arms per batch of work), ``repeats`` timed passes
    after one warm-up pass; the arms of a job run in turn, in alternating order, so load hits all alike."""
    seconds = dict.fromkeys(jobs[0], 0.0)
    with torch.inference_mode():
        for r in range(repeats + 1):  # the first pass warms up
            for i, job in enumerate(jobs):
                for name in list(job) if (r + i) % 2 == 0 else list(reversed(job)):
                    t = time.perf_counter()
                    job[name]()
                    if r:
                        seconds[name] += time.perf_counter() - t
    return seconds


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    line = lambda cells: "  ".join(str(c).rjust(w) if i else str(c).ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))
