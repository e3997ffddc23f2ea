"""The result lines a job prints (Auptimizer's ``#Auto:`` protocol) and how the runner reads them back.

A compression script ends with ``print_result(accuracy)`` (the Auptimizer face,
:mod:`slimkit.faces.auptimizer.result`); the runner reads the script's output and takes the last result line as
the job's metric (the value automatic mode optimises). The lines::

    #Auto: result=0.9711
    #Auto: result=[0.9711, 3.2]                          (print_result([accuracy, latency]): several objectives)
    #Auto: extra={"macs": 1203904, "params": 41234}     (only with keyword arguments)
    #Auto: intermediate={"step": 3, "value": 0.93}       (print_result(0.93, step=3): a value on the way)

All lines are plain text, one per call, flushed at once; :func:`parse_result` reads the final result back and
:func:`parse_intermediate` one intermediate line (the runner reports those to Optuna, whose pruner may stop the
trial early). A script that calls ``print_result(value)`` once per epoch, as Auptimizer's scripts do, reports a
step with each call and its result with the last (:class:`StepReader`).
"""

from __future__ import annotations

import json
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


class StepReader:
    """Reads a job's output line by line and returns its intermediate values as ``(step, value)``.

    ``print_result(value, step=k)`` lines name their step. A script that never names one reports the way
    Auptimizer's scripts do, ``print_result(value)`` once per epoch: then every result line is a step (1, 2, ...)
    and the last one is also the job's result. A result line becomes a step only when another follows it, so a
    pruner never stops a job at its last line (:meth:`last` gives that final step once the job has ended).
    """

    def __init__(self) -> None:
        self.explicit = False
        self.results = 0
        self.pending: tuple[int, float] | None = None

    def read(self, line: str) -> tuple[int, float] | None:
        """``(step, value)`` when ``line`` completes an intermediate value, else None."""
        step = parse_intermediate(line)
        if step is not None:
            self.explicit, self.pending = True, None
            return step
        if self.explicit or not line.strip().startswith(RESULT_PREFIX):
            return None
        try:
            result = parse_result(line)
        except ConfigError:
            return None
        if result is None:
            return None
        self.results += 1
        previous, self.pending = self.pending, (self.results, result.metric)
        return previous

    def last(self) -> tuple[int, float] | None:
        """The step of the last result line (a script reporting once per epoch), None otherwise."""
        return None if self.explicit else self.pending
