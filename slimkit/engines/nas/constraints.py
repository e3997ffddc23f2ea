"""Cost of a subnet (FLOPs, MACs, parameters, measured latency), constraint ranges, and BN recalibration.

Metrics (what ``constraints_range`` keys mean), in two unit systems (:data:`UNITS`):

* ``flops``: ``units="mmrazor"``: millions of multiply-accumulates (what MMRazor's estimator reports as FLOPs:
  ``flops=(0, 330)`` is SPOS-ShuffleNetV2's 330M); ``units="slimkit"``: 2 x the multiply-accumulates, counted;
* ``macs``: the multiply-accumulates of one forward on the example inputs (:func:`slimkit.evaluation.count_macs`),
  in millions or counted;
* ``params``: parameters of the exported subnet (:func:`slimkit.evaluation.count_parameters`), in millions or
  counted;
* ``latency``: median milliseconds of the exported subnet (:func:`slimkit.evaluation.measure_latency`).

A range is ``(low, high)`` or a single number (the upper bound). Ranges are kept in slimkit's units inside.
:func:`cost_bounds` gives the exact lowest and highest FLOPs / MACs / parameters of a search space made of
one-shot ops alone from a few forwards, so an unmeetable range is reported at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from slimkit.data.batches import split_batch
from slimkit.engines.nas.export import export_subnet
from slimkit.engines.nas.mutables import OneShotMutableOP
from slimkit.engines.nas.mutator import NasMutator, Subnet
from slimkit.errors import ConfigError
from slimkit.evaluation import count_macs, count_parameters, measure_latency
from slimkit.evaluation.runtime import eval_mode
from slimkit.utils import Inputs, model_device, move_inputs, run_model

METRICS: tuple[str, ...] = ("flops", "macs", "params", "latency")
#: unit systems of ``constraints_range``: how many slimkit units (counts, 2 x MACs for flops) one unit is
UNITS: dict[str, dict[str, float]] = {
    "mmrazor": {"flops": 2e6, "macs": 1e6, "params": 1e6, "latency": 1.0},
    "slimkit": {"flops": 1.0, "macs": 1.0, "params": 1.0, "latency": 1.0}}
_UNIT_NAMES = {"mmrazor": {"flops": "M MACs (MMRazor's FLOPs)", "macs": "M MACs", "params": "M params",
                           "latency": "ms"},
               "slimkit": {"flops": "FLOPs (2 x MACs)", "macs": "MACs", "params": "params", "latency": "ms"}}
Ranges = dict[str, tuple[float, float]]


def check_units(units: Any) -> str:
    """``units`` if it names a unit system of :data:`UNITS`, else ConfigError."""
    if units not in UNITS:
        raise ConfigError(f"units must be one of {', '.join(map(repr, UNITS))} (how constraints_range numbers "
                          f"read), got {units!r}.")
    return str(units)


def in_units(key: str, value: float, units: str) -> str:
    """``value`` (slimkit units) written in ``units`` with the unit's name, e.g. ``"325.3 M MACs (...)"``."""
    shown = value / UNITS[units][key]
    text = f"{shown:.4g}" if units == "mmrazor" or key == "latency" else f"{shown:,.0f}"
    return f"{text} {_UNIT_NAMES[units][key]}" if math.isfinite(shown) else str(shown)


def parse_constraints(constraints_range: Mapping[str, Any] | None, units: str = "slimkit") -> Ranges:
    """``{metric: (low, high)}`` in slimkit units from ``{metric: high}`` or ``{metric: (low, high)}`` in ``units``.

    Unknown metrics are named.
    """
    scale = UNITS[check_units(units)]
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
        ranges[key] = (float(low) * scale[key], float(high) * scale[key])
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


def cost_bounds(supernet: nn.Module, mutator: NasMutator, keys: Iterable[str],
                example_inputs: Inputs | None) -> dict[str, tuple[float, float]]:
    """Exact ``(lowest, highest)`` of ``flops`` / ``macs`` / ``params`` over every subnet, when they are additive.

    They are when every mutable is a :class:`OneShotMutableOP` and none sits inside another: each op's cost then
    depends on its own choice only, and a forward per choice index (with each op timed by hooks) gives them
    all. Returns ``{}`` for other search spaces (widths and depths interact) and for latency.
    """
    keys = [k for k in keys if k in ("flops", "macs", "params")]
    names = list(mutator.mutables)
    nested = any(a != b and a.startswith(b + ".") for a in names for b in names)
    if not keys or nested or not all(isinstance(m, OneShotMutableOP) for m in mutator.mutables.values()):
        return {}
    space = mutator.search_space()
    first = {n: c[0] for n, c in space.items()}
    out: dict[str, tuple[float, float]] = {}
    if "params" in keys:
        cost = {n: {c: sum(p.numel() for p in m.candidates[c].parameters()) for c in space[n]}
                for n, m in mutator.mutables.items()}
        base = count_parameters(export_subnet(supernet, first)) - sum(cost[n][first[n]] for n in names)
        out["params"] = (base + sum(min(v.values()) for v in cost.values()),
                         base + sum(max(v.values()) for v in cost.values()))
    if "flops" in keys or "macs" in keys:
        if example_inputs is None:
            return out
        macs: dict[str, dict[Any, float]] = {n: {} for n in names}
        base_macs = 0.0
        for i in range(max(len(c) for c in space.values())):
            subnet = {n: c[min(i, len(c) - 1)] for n, c in space.items()}
            total, per_op = _op_macs(supernet, mutator, subnet, example_inputs)
            for n in names:
                macs[n][subnet[n]] = per_op[n]
            base_macs = total - sum(per_op.values())
        low = base_macs + sum(min(v.values()) for v in macs.values())
        high = base_macs + sum(max(v.values()) for v in macs.values())
        out.update({k: (f * low, f * high) for k, f in (("macs", 1.0), ("flops", 2.0)) if k in keys})
    return out


def _op_macs(supernet: nn.Module, mutator: NasMutator, subnet: Subnet,
             example_inputs: Inputs) -> tuple[float, dict[str, float]]:
    """(MACs of one forward on ``subnet``, MACs inside each mutable)."""
    mutator.set_choices(subnet)
    counter, start, per_op, handles = FlopCounterMode(display=False), {}, {}, []
    for name, module in mutator.mutables.items():
        handles.append(module.register_forward_pre_hook(
            lambda m, a, name=name: start.__setitem__(name, counter.get_total_flops())))
        handles.append(module.register_forward_hook(
            lambda m, a, o, name=name: per_op.__setitem__(name, per_op.get(name, 0) + counter.get_total_flops()
                                                         - start[name])))
    try:
        with eval_mode(supernet), torch.no_grad(), counter:
            run_model(supernet, move_inputs(example_inputs, model_device(supernet)))
    finally:
        for handle in handles:
            handle.remove()
    return counter.get_total_flops() / 2, {n: per_op.get(n, 0) / 2 for n in mutator.mutables}


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
