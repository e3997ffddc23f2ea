"""What an experiment optimises: slimkit's own measurements, a script's reported values, their directions.

The script-free form names measurements slimkit makes (``{"accuracy": "max", "latency": "min"}``); a script
names the values it reports with ``print_result([a, b])`` in ``objectives``, or (Auptimizer's
``resource_args.multi_res_labels``) names extra values it reports after its one metric.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slimkit.errors import ConfigError
from slimkit.experiment.space import ranked

TARGETS = ("min", "max")
#: objective -> default direction
OBJECTIVES = {"accuracy": "max", "perplexity": "min", "cosine": "max", "latency": "min", "size": "min",
              "params": "min", "macs": "min"}


def measured_objectives(raw: Mapping[str, Any]) -> dict[str, str]:
    """The script-free form's ``objectives`` (default cosine max, latency min), checked."""
    value = raw.get("objectives", {"cosine": "max", "latency": "min"})
    if isinstance(value, list):
        bad = [name for name in value if not isinstance(name, str)]
        if bad:
            raise ConfigError(f"objectives: names of measurements ({', '.join(OBJECTIVES)}); got {bad[0]!r}.")
        value = {name: OBJECTIVES.get(name, "") for name in value}
    if not isinstance(value, Mapping) or not value:
        raise ConfigError(f"objectives: an object such as {{\"accuracy\": \"max\", \"latency\": \"min\"}}; "
                          f"got {value!r}.")
    for name, goal in value.items():
        if name not in OBJECTIVES:
            raise ConfigError(f"objectives.{name}: not a measurement slimkit makes. Valid (closest first): "
                              f"{', '.join(ranked(str(name), tuple(OBJECTIVES)))}.")
        if goal not in TARGETS:
            raise ConfigError(f"objectives.{name}: {goal!r} is not a direction; use 'min' or 'max'.")
    return dict(value)


def script_objectives(value: Any) -> dict[str, str]:
    """A script's own objectives: ``{"accuracy": "max", "latency_ms": "min"}``, the order of print_result([...])."""
    if not isinstance(value, Mapping) or not value:
        raise ConfigError(f"objectives: the values your script reports with print_result([a, b]), in that order, "
                          f"each 'min' or 'max', e.g. {{\"accuracy\": \"max\", \"latency_ms\": \"min\"}}; "
                          f"got {value!r}.")
    for name, goal in value.items():
        if goal not in TARGETS:
            raise ConfigError(f"objectives.{name}: {goal!r} is not a direction; use 'min' or 'max'.")
    return dict(value)


def multi_res_labels(value: Any) -> list[str]:
    """``resource_args.multi_res_labels``: distinct names of the values reported after the metric."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value) or len(set(value)) < len(value):
        raise ConfigError(f"resource_args.multi_res_labels: a list of distinct names for the values the script "
                          f"reports after its metric (print_result([metric, *values])); got {value!r}.")
    return list(value)
