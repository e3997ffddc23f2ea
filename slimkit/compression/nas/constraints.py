"""Cost of a subnet (FLOPs, MACs, parameters, measured latency), constraint ranges, and BN recalibration.

Metrics (what ``constraints_range`` keys mean):

* ``flops``: 2 x the multiply-accumulates of one forward on the example inputs (:func:`slimkit.evaluation.count_macs`);
* ``macs``: the multiply-accumulates themselves;
* ``params``: parameters of the exported subnet (:func:`slimkit.evaluation.count_parameters`);
* ``latency``: median milliseconds of the exported subnet (:func:`slimkit.evaluation.measure_latency`).

A range is ``(low, high)`` or a single number (the upper bound).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from slimkit.compression.nas.export import export_subnet
from slimkit.compression.nas.mutator import NasMutator, Subnet
from slimkit.data.batches import split_batch
from slimkit.errors import ConfigError
from slimkit.evaluation import count_macs, count_parameters, measure_latency
from slimkit.evaluation.runtime import eval_mode
from slimkit.utils import Inputs, model_device, move_inputs, run_model

METRICS: tuple[str, ...] = ("flops", "macs", "params", "latency")
Ranges = dict[str, tuple[float, float]]


def parse_constraints(constraints_range: Mapping[str, Any] | None) -> Ranges:
    """``{metric: (low, high)}`` from ``{metric: high}`` or ``{metric: (low, high)}``; unknown metrics are named."""
    ranges: Ranges = {}
    for key, value in (constraints_range or {}).items():
        if key not in METRICS:
            raise ConfigError(f"Unknown constraint {key!r}; constraints_range takes {', '.join(METRICS)} (flops = "
                              "2 x MACs, latency in milliseconds).")
        pair = isinstance(value, (list, tuple))
        low, high = (tuple(value) if len(value) == 2 else (None, None)) if pair else (0.0, value)
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
        if not numbers or low > high:
            raise ConfigError(f"constraints_range[{key!r}] must be an upper bound or a (low, high) pair with low <= "
                              f"high, got {value!r}.")
        ranges[key] = (float(low), float(high))
    return ranges


def measure_subnet(supernet: nn.Module, subnet: Subnet, keys: Iterable[str], example_inputs: Inputs | None,
                   latency_threads: int = 1) -> dict[str, float]:
    """The requested metrics of ``subnet`` (the supernet's choices are set to it)."""
    keys = list(keys)
    if keys and example_inputs is None and any(k != "params" for k in keys):
        raise ConfigError(f"Constraints on {', '.join(k for k in keys if k != 'params')} need example_inputs (one "
                          "input batch, e.g. x[:1]) to count or time a forward.")
    mutator = NasMutator(supernet)
    mutator.set_choices(subnet)
    out: dict[str, float] = {}
    if "flops" in keys or "macs" in keys:
        with eval_mode(supernet):
            macs = count_macs(supernet, example_inputs)
        out.update({k: float(v) for k, v in (("macs", macs), ("flops", 2 * macs)) if k in keys})
    if "params" in keys or "latency" in keys:
        exported = export_subnet(supernet)
        if "params" in keys:
            out["params"] = float(count_parameters(exported))
        if "latency" in keys:
            out["latency"] = measure_latency(exported, example_inputs, warmup=2, repeats=5,
                                             threads=latency_threads).median_ms
    return out


def violated(metrics: Mapping[str, float], ranges: Ranges) -> list[str]:
    """The metrics outside their range."""
    return [k for k, (low, high) in ranges.items() if not low <= metrics[k] <= high]


def reachable(mutator: NasMutator, start: Subnet, metric: Callable[[Subnet], float], lowest: bool = True,
              passes: int = 4) -> tuple[float, Subnet]:
    """The lowest (or highest) ``metric`` reachable from ``start`` by coordinate descent over the choices.

    Exact for metrics monotone in each choice (FLOPs, MACs, parameters of typical supernets).
    """
    sign = 1.0 if lowest else -1.0
    best, best_value = dict(start), sign * metric(start)
    for _ in range(passes):
        improved = False
        for name, choices in mutator.search_space().items():
            for choice in choices:
                trial = {**best, name: choice}
                value = sign * metric(trial)
                if value < best_value:
                    best, best_value, improved = trial, value, True
        if not improved:
            break
    return sign * best_value, best


def format_metric(key: str, value: float) -> str:
    """``12,345`` for counts, ``1.23 ms`` for latency."""
    return f"{value:.3g} ms" if key == "latency" else f"{value:,.0f}" if math.isfinite(value) else str(value)


def calibrate_bn(model: nn.Module, batches: Iterable[Any], num_batches: int | None = None) -> nn.Module:
    """Recompute every batch norm's running statistics on ``batches`` for the active subnet, in place.

    A supernet's shared BN statistics mix all the paths trained; each subnet needs its own before it is
    evaluated (SPOS, MMRazor's ``calibrate_sample_num``). Statistics are reset, then averaged over the
    batches (cumulative average) in train mode without gradients; momentum and modes are restored.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    momenta = [m.momentum for m in norms]
    seen, device = 0, model_device(model)
    with eval_mode(model), torch.no_grad():
        for m in norms:
            m.reset_running_stats()
            m.momentum = None
            m.train()
        try:
            for batch in batches:
                if num_batches is not None and seen >= num_batches:
                    break
                inputs, _ = split_batch(batch)
                run_model(model, move_inputs(inputs, device))
                seen += 1
        finally:
            for m, momentum in zip(norms, momenta, strict=True):
                m.momentum = momentum
    if norms and seen == 0:
        raise ConfigError("calibrate_bn got no batch; pass a non-empty list or DataLoader of training batches.")
    return model
