"""``print_result``: a script reports its metric to the experiment runner the way Auptimizer does.

It writes the ``#Auto:`` lines :mod:`slimkit.experiment.result` describes and the runner reads back.
"""

from __future__ import annotations

import json
import numbers
import sys
from typing import Any

from slimkit.errors import ConfigError
from slimkit.experiment.result import EXTRA_PREFIX, INTERMEDIATE_PREFIX, RESULT_PREFIX

__all__ = ["print_result"]


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
    result is the last call without ``step``. Auptimizer's own way works as well: call ``print_result(value)``
    once per epoch (its signature is ``print_result(result)``); each call is then the next step's value and
    the last call the result. With ``resource_args.multi_res_labels`` the list form is ``[metric, *extras]``.
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
