"""Reporting a script's metric to the experiment runner the way Auptimizer does: a ``#Auto:`` line on stdout.

A compression script ends with ``print_result(accuracy)``; the runner reads the script's output and takes
the last result line as the job's metric (the value automatic mode optimises). ``print_result`` writes::

    #Auto: result=0.9711
    #Auto: result=[0.9711, 3.2]                          (print_result([accuracy, latency]): several objectives)
    #Auto: extra={"macs": 1203904, "params": 41234}     (only with keyword arguments)
    #Auto: intermediate={"step": 3, "value": 0.93}       (print_result(0.93, step=3): a value on the way)

All lines are plain text, one per call, flushed at once; :func:`parse_result` reads the final result back and
:func:`parse_intermediate` one intermediate line (the runner reports those to Optuna, whose pruner may stop the
trial early).
"""

from __future__ import annotations

import json
import math
import numbers
import sys
from dataclasses import dataclass, field
from typing import Any

from slimkit.errors import ConfigError

RESULT_PREFIX = "#Auto: result="
EXTRA_PREFIX = "#Auto: extra="
INTERMEDIATE_PREFIX = "#Auto: intermediate="


@dataclass
class ScriptResult:
    """The metric a script reported (``float``; nan/inf allowed for failed runs) and its extra values.

    ``values`` holds every reported value (one, or one per objective for ``print_result([a, b])``);
    ``metric`` is the first.
    """

    metric: float
    extra: dict[str, Any] = field(default_factory=dict)
    values: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.values:
            self.values = [self.metric]


def _metric_value(metric: Any) -> float:
    if not isinstance(metric, numbers.Real) and callable(getattr(metric, "item", None)):
        try:
            metric = metric.item()  # a one-element tensor or numpy value
        except (ValueError, RuntimeError):
            pass
    if isinstance(metric, bool) or not isinstance(metric, numbers.Real):
        raise ConfigError(f"print_result needs one number (the metric to report), got {metric!r} "
                          f"({type(metric).__name__}); pass e.g. print_result(0.97) and other values as keywords.")
    return float(metric)


def print_result(metric: float | list[float] | tuple[float, ...], step: int | None = None, **extra: Any) -> str:
    """Print ``#Auto: result=<metric>`` (and ``#Auto: extra=<JSON>`` for keyword values); return the text.

    ``metric`` is the number the runner records and, in automatic mode, optimises (a Python number, a
    numpy scalar or a one-element tensor), or a list of numbers, one per objective the experiment file names
    in ``"objectives"`` (in that order), for a search of several objectives. Keyword values must be
    JSON-serialisable (numbers, strings, lists, dicts); the runner stores them beside the metric. With
    ``step=k`` the value is an intermediate one (e.g. the accuracy after epoch ``k``): the runner records it
    and, with ``early_stop``, Optuna's pruner may stop a trial whose intermediate values lag behind; the final
    result is the last call without ``step``.
    """
    if isinstance(metric, (list, tuple)):
        if step is not None:
            raise ConfigError("print_result([...], step=...): intermediate values are one number (Optuna's pruners "
                              "follow one objective); report the list only as the final result.")
        if not metric:
            raise ConfigError("print_result([]): give one number per objective, e.g. print_result([accuracy, "
                              "latency_ms]).")
        values = [_metric_value(m) for m in metric]
        return _print_lines(f"{RESULT_PREFIX}{json.dumps(values)}", extra)
    value = _metric_value(metric)
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ConfigError(f"print_result(..., step={step!r}): step must be a whole number >= 0 (the epoch or "
                              "iteration the value belongs to).")
        text = INTERMEDIATE_PREFIX + json.dumps({"step": step, "value": value})
        print(text, file=sys.stdout, flush=True)
        return text
    return _print_lines(f"{RESULT_PREFIX}{value!r}", extra)


def _print_lines(result_line: str, extra: dict[str, Any]) -> str:
    lines = [result_line]
    if extra:
        try:
            payload = json.dumps(extra, sort_keys=True, allow_nan=True)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"print_result extra values must be JSON-serialisable (numbers, strings, lists, "
                              f"dicts): {exc}. Convert tensors with float(x) or x.tolist().") from exc
        lines.append(f"{EXTRA_PREFIX}{payload}")
    text = "\n".join(lines)
    print(text, file=sys.stdout, flush=True)
    return text


def parse_result(output: str) -> ScriptResult | None:
    """The last reported result in a script's ``output`` (``None`` when it reported none).

    An ``extra`` line belongs to the result line just before it.
    """
    found: ScriptResult | None = None
    for raw in output.splitlines():
        line = raw.strip()
        if line.startswith(RESULT_PREFIX):
            text = line[len(RESULT_PREFIX):].strip()
            try:
                values = json.loads(text) if text.startswith("[") else [float(text)]
                if not values or not isinstance(values, list):
                    raise ValueError(text)
                values = [float(v) for v in values]
                found = ScriptResult(values[0], values=values)
            except (ValueError, TypeError, json.JSONDecodeError) as exc:
                raise ConfigError(f"Bad result line {line!r}: {text!r} is not a number or a list of numbers. "
                                  "Report metrics with slimkit.print_result(value) or print_result([a, b])."
                                  ) from exc
        elif line.startswith(EXTRA_PREFIX) and found is not None:
            try:
                extra = json.loads(line[len(EXTRA_PREFIX):])
            except json.JSONDecodeError as exc:
                raise ConfigError(f"Bad extra line {line!r}: not JSON ({exc}).") from exc
            if not isinstance(extra, dict):
                raise ConfigError(f"Bad extra line {line!r}: expected a JSON object.")
            found.extra = extra
    return found


def is_finite_result(result: ScriptResult | None) -> bool:
    """True when a result was reported and its metric is a finite number (usable by a search)."""
    return result is not None and math.isfinite(result.metric)


def parse_intermediate(line: str) -> tuple[int, float] | None:
    """``(step, value)`` when ``line`` is an intermediate line ``print_result(value, step=step)`` wrote, else None."""
    text = line.strip()
    if not text.startswith(INTERMEDIATE_PREFIX):
        return None
    try:
        payload = json.loads(text[len(INTERMEDIATE_PREFIX):])
        return int(payload["step"]), float(payload["value"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
