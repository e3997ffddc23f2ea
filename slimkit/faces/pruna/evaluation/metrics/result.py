"""Results of Pruna-style metrics: one :class:`MetricResult` per metric, a list of them that prints as a table."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class MetricResult:
    """One metric's value as Pruna returns it: ``name``, ``params``, ``result``, ``higher_is_better``, ``metric_units``.

    ``value`` and ``unit`` are the same numbers under plainer names.
    """

    name: str
    params: dict[str, Any]
    result: float | int
    higher_is_better: bool | None = None
    metric_units: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def value(self) -> float | int:
        """The metric's value (Pruna's ``result``)."""
        return self.result

    @property
    def unit(self) -> str:
        """The value's unit (Pruna's ``metric_units``; ``""`` when it has none)."""
        return self.metric_units or ""

    def __str__(self) -> str:
        units = f" {self.metric_units}" if self.metric_units else ""
        return f"{self.name}: {self.result}{units}"


def _fmt(value: float | int) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:,.0f}" if abs(value) >= 1e5 else f"{value:.6g}"


def _direction(higher_is_better: bool | None) -> str:
    return "" if higher_is_better is None else "higher" if higher_is_better else "lower"


class EvaluationResults(list):
    """The list of :class:`MetricResult` that ``EvaluationAgent.evaluate`` returns (a ``list``, as in Pruna).

    Adds ``result["latency"]`` lookup by metric name, :meth:`to_dict`, :meth:`table` and :meth:`print` (rich).
    """

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            for item in self:
                if item.name == key:
                    return item
            raise KeyError(f"No result named {key!r}; the results are {[item.name for item in self]}.")
        return super().__getitem__(key)

    def to_dict(self) -> dict[str, float | int]:
        """``{metric name: value}``."""
        return {item.name: item.result for item in self}

    def _rows(self) -> list[list[str]]:
        return [[item.name, _fmt(item.result), item.unit, _direction(item.higher_is_better)] for item in self]

    def table(self) -> str:
        """Plain-text table: metric, value, unit, which direction is better."""
        cells = [["metric", "value", "unit", "better"], *self._rows()]
        widths = [max(len(row[i]) for row in cells) for i in range(4)]
        lines = ["  ".join((row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2].ljust(widths[2]),
                            row[3])).rstrip() for row in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines + self.notes())

    def notes(self) -> list[str]:
        """The results' notes, each once, prefixed by the metrics it qualifies (``latency, total_time: ...``)."""
        owners: dict[str, list[str]] = {}
        for item in self:
            for note in item.notes:
                owners.setdefault(note, []).append(item.name)
        return [f"{', '.join(names)}: {note}" for note, names in owners.items()]

    def __str__(self) -> str:
        return self.table()

    def print(self) -> None:
        """Print the results as a rich table (plain text when rich is not installed)."""
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            print(self.table())
            return
        table = Table(title="evaluation")
        for name, justify in (("metric", "left"), ("value", "right"), ("unit", "left"), ("better", "left")):
            table.add_column(name, justify=justify)
        for row in self._rows():
            table.add_row(*row)
        console = Console()
        if not console.is_terminal:
            console = Console(width=120)
        console.print(table)
        for line in self.notes():
            console.print(line, markup=False)
