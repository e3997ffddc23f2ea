"""Side-by-side comparison of a base model and its smashed version, with plain verdicts.

The verdicts say NOT FASTER / NOT SMALLER when that is the truth: the most common complaint against
compression tools is a "compressed" model that is neither.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from slimkit.core.coverage import coverage_summary
from slimkit.errors import ConfigError
from slimkit.evaluation.counting import count_macs_by_dtype, count_parameters
from slimkit.evaluation.quality import accuracy, fidelity
from slimkit.evaluation.runtime import measure_latency_pair
from slimkit.evaluation.size import size_on_disk
from slimkit.utils import Inputs

SPEEDUP_THRESHOLD = 1.05  # a speedup below this is within noise of "the same speed"
FULL_COVERAGE = 0.99  # a quantizer below this share of the weights it was not told to exclude is "NOT FULLY QUANTIZED"
SIZE_TOLERANCE = 1e-3  # a size ratio below 1 + this is "the same size"
_DIRECTIONS = ("lower", "higher", None)
_HEADER = ("metric", "base", "smashed", "ratio", "better")


@dataclass
class MetricRow:
    """One metric: base and smashed values, ``ratio`` (> 1 means the smashed model is better) and direction.

    ``ratio`` is base/smashed when lower is better, smashed/base when higher is better (so latency gives the
    speedup and size the compression factor); None when a value is missing or has no direction.
    """

    key: str
    label: str
    base: float | None
    smashed: float | None
    better: str | None  # "lower", "higher" or None
    has_ratio: bool = True  # False for rows whose base value is only a reference (fidelity)
    ratio: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.ratio = _ratio(self.base, self.smashed, self.better) if self.has_ratio else None


def _ratio(base: float | None, smashed: float | None, better: str | None) -> float | None:
    if base is None or smashed is None:
        return None
    num, den = (smashed, base) if better in ("higher", None) else (base, smashed)
    if den == 0:
        return None if num == 0 else math.inf
    return num / den


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) >= 1000):
        return f"{int(value):,}"
    if math.isinf(value) or math.isnan(value):
        return str(value)
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _fmt_ratio(row: MetricRow) -> str:
    if not row.has_ratio:
        return ""
    return "n/a" if row.ratio is None else f"{row.ratio:.3g}x"


@dataclass
class Comparison:
    """Result of :func:`compare`: metric rows and plain-language verdicts."""

    rows: list[MetricRow]
    verdicts: list[str]
    threads: int = 2

    def row(self, key: str) -> MetricRow:
        """Row with ``key`` (e.g. ``"latency_ms"``, ``"size_bytes"``)."""
        for row in self.rows:
            if row.key == key:
                return row
        raise KeyError(f"No metric {key!r}; available: {[r.key for r in self.rows]}")

    def _cells(self) -> list[list[str]]:
        return [[r.label, _fmt(r.base), _fmt(r.smashed), _fmt_ratio(r), r.better or ""] for r in self.rows]

    def table(self) -> str:
        """Plain-text table with aligned columns (ratio > 1 means the smashed model is better)."""
        cells = [list(_HEADER), *self._cells()]
        widths = [max(len(row[i]) for row in cells) for i in range(len(_HEADER))]
        lines = []
        for n, row in enumerate(cells):
            parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:-1], widths[1:-1], strict=True)]
            lines.append("  ".join([*parts, row[-1].ljust(widths[-1])]).rstrip())
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table() + "\n\n" + "\n".join(self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: ``rows`` (list of dicts), ``verdicts`` and ``threads``."""
        return {"rows": [asdict(r) for r in self.rows], "verdicts": list(self.verdicts), "threads": self.threads}

    def print(self) -> None:
        """Print the table (a rich table when rich is installed) and the verdicts."""
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            print(str(self))
            return
        table = Table(title="base vs smashed")
        for name in _HEADER:  # text columns left, numbers right
            table.add_column(name, justify="left" if name in ("metric", "better") else "right")
        for cells in self._cells():
            table.add_row(*cells)
        console = Console()
        if not console.is_terminal:  # pipes and CI logs: do not wrap the table at 80 columns
            console = Console(width=120)
        console.print(table)
        for verdict in self.verdicts:
            console.print(verdict, markup=False, style="bold red" if verdict.startswith("NOT") else None)


class _BestEffort:
    """Runs measurements that may fail for one model; failures become "n/a" plus a verdict line saying why."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def __call__(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # one unmeasurable metric must not sink the whole report
            self.notes.append(f"{what}: n/a ({type(exc).__name__}: {exc})")
            return None

    def pair(self, what: str, fn: Callable[[Any], Any], base: Any, smashed: Any) -> tuple[Any, Any]:
        return self(f"{what} of base", lambda: fn(base)), self(f"{what} of smashed", lambda: fn(smashed))


def _extra_rows(extra: dict | None) -> Iterable[MetricRow]:
    for name, value in (extra or {}).items():
        direction = value[2] if isinstance(value, (tuple, list)) and len(value) == 3 else None
        if not isinstance(value, (tuple, list)) or len(value) not in (2, 3) or direction not in _DIRECTIONS:
            raise ConfigError(
                f"extra[{name!r}] must be (base, smashed) or (base, smashed, 'higher'|'lower'), got {value!r}; "
                "e.g. extra={'recall@10': (0.91, 0.90, 'higher')}."
            )
        yield MetricRow(str(name), str(name), value[0], value[1], direction)


def applied_coverage(smashed: Any) -> dict[str, dict[str, Any]]:
    """``{algorithm: coverage record}`` of a SmashedModel's weight quantizers (its applied records), else ``{}``."""
    applied = getattr(smashed, "applied", None)
    records = [a for a in applied if isinstance(a, dict)] if isinstance(applied, list) else []
    states = [(str(a.get("name")), a.get("state")) for a in records]
    return {name: state["coverage"] for name, state in states
            if isinstance(state, dict) and isinstance(state.get("coverage"), dict)}


def _coverage_rows(coverage: dict[str, dict[str, Any]]) -> tuple[list[MetricRow], list[str]]:
    """A share row per quantizer, and verdicts: what it quantized and left, NOT FULLY QUANTIZED below 99 %."""
    rows, verdicts = [], []
    for name, record in coverage.items():
        share = float(record.get("share", 0.0))
        rows.append(MetricRow(f"quantized_share_{name}", f"Linear-like params quantized ({name})", 0.0, share,
                              "higher", has_ratio=False))
        lines = coverage_summary(record)
        eligible = float(record.get("share_not_excluded", share))
        if eligible < FULL_COVERAGE:
            verdicts.append(f"NOT FULLY QUANTIZED: {name} left {100 * (1 - eligible):.1f}% of the Linear-like "
                            "parameters it was not told to exclude in full precision")
        verdicts.append(f"{name}: " + "; ".join(lines))
    return rows, verdicts


def _mac_rows(base: dict[str, int] | None, smashed: dict[str, int] | None) -> list[MetricRow]:
    """The MACs total, then one row per type when either model computes in more than one."""
    total = [None if d is None else sum(d.values()) for d in (base, smashed)]
    rows = [MetricRow("macs", "MACs per forward", total[0], total[1], "lower")]
    labels = list(dict.fromkeys([*(base or {}), *(smashed or {})]))
    if len(labels) > 1:
        rows.extend(MetricRow(f"macs_{label}", f"  MACs in {label}", None if base is None else base.get(label, 0),
                              None if smashed is None else smashed.get(label, 0), None, has_ratio=False)
                    for label in labels)
    return rows


def _speed_verdict(base_ms: float, smashed_ms: float, threads: int) -> str:
    speedup = base_ms / smashed_ms if smashed_ms > 0 else math.inf
    detail = f"median {base_ms:.3g} ms -> {smashed_ms:.3g} ms"
    if speedup < SPEEDUP_THRESHOLD:
        slower = f", {1 / speedup:.2f}x slower" if speedup < 0.99 else ""
        return (
            f"NOT FASTER: {speedup:.2f}x speedup at {threads} threads (threshold {SPEEDUP_THRESHOLD:.2f}x; "
            f"{detail}{slower})"
        )
    return f"{speedup:.2f}x faster at {threads} threads ({detail})"


def _size_verdict(base_b: int, smashed_b: int) -> str:
    ratio = base_b / smashed_b if smashed_b > 0 else math.inf
    detail = f"{base_b / 1e6:.3g} MB -> {smashed_b / 1e6:.3g} MB"
    if ratio < 1.0 + SIZE_TOLERANCE:
        larger = f", {smashed_b / base_b:.2f}x larger" if ratio < 1.0 - SIZE_TOLERANCE else ""
        return f"NOT SMALLER: {ratio:.2f}x size ratio on disk ({detail}{larger})"
    return f"{ratio:.2f}x smaller on disk ({detail})"


def compare(
    base: Any,
    smashed: Any,
    inputs: Inputs,
    *,
    data: Iterable | None = None,
    threads: int = 2,
    warmup: int = 3,
    repeats: int = 10,
    extra: dict | None = None,
    fresh_inputs: bool = False,
    coverage: dict[str, dict[str, Any]] | None = None,
) -> Comparison:
    """Measure ``base`` and ``smashed`` side by side and say plainly whether the smashed one is better.

    Rows: size on disk, parameters, MACs, median latency at ``threads`` threads (both models timed in
    alternating blocks so machine noise hits both), throughput, fidelity (cosine mean/min and max-abs of
    the main output on ``inputs``), accuracy when ``data`` yields labelled batches, and ``extra`` rows
    ``name -> (base, smashed[, "higher"|"lower"])``. A metric that cannot be measured shows "n/a".
    Verdicts: "NOT FASTER" below a 1.05x speedup, "NOT SMALLER" when not smaller on disk. ``fresh_inputs=True``
    times every call on new token rows (same shapes), so a cacher is not timed on its own cache hits.

    MACs are split by type (fp32, int8, int4 weights...) when the models compute in more than one. Quantization
    coverage (``{algorithm: record}``, by default read from a SmashedModel's applied records) adds a row with the
    share of Linear-like parameters each quantizer quantized, a line naming what it left and why, and
    "NOT FULLY QUANTIZED" when it left more than 1 % of the weights it was not told to exclude.
    """
    extra_rows = list(_extra_rows(extra))  # validate before the slow part
    best = _BestEffort()
    base_size, smashed_size = best.pair("size on disk", size_on_disk, base, smashed)
    base_params, smashed_params = best.pair("parameters", count_parameters, base, smashed)
    base_macs, smashed_macs = best.pair("MACs", lambda m: count_macs_by_dtype(m, inputs), base, smashed)
    cover_rows, cover_verdicts = _coverage_rows(applied_coverage(smashed) if coverage is None else coverage)
    base_lat, smashed_lat = measure_latency_pair(base, smashed, inputs, warmup=warmup, repeats=repeats, threads=threads,
                                                 fresh=fresh_inputs)
    fid = best("fidelity", lambda: fidelity(base, smashed, inputs))
    cos_mean, cos_min, max_abs = (None, None, None) if fid is None else (fid.cosine_mean, fid.cosine_min, fid.max_abs)
    rows = [
        MetricRow("size_bytes", "size on disk (bytes)", base_size, smashed_size, "lower"),
        MetricRow("parameters", "parameters", base_params, smashed_params, "lower"),
        *_mac_rows(base_macs, smashed_macs),
        MetricRow(
            "latency_ms", f"latency median (ms) @ {threads} threads", base_lat.median_ms, smashed_lat.median_ms, "lower"
        ),
        MetricRow("throughput", "throughput (items/s)", base_lat.throughput(), smashed_lat.throughput(), "higher"),
        MetricRow("cosine_mean", "fidelity cosine mean", 1.0, cos_mean, "higher", has_ratio=False),
        MetricRow("cosine_min", "fidelity cosine min", 1.0, cos_min, "higher", has_ratio=False),
        MetricRow("max_abs", "fidelity max abs diff", 0.0, max_abs, "lower", has_ratio=False),
    ]
    verdicts = [_speed_verdict(base_lat.median_ms, smashed_lat.median_ms, threads)]
    if base_size is not None and smashed_size is not None:
        verdicts.append(_size_verdict(base_size, smashed_size))
    if data is not None:
        base_acc, smashed_acc = accuracy(base, data), accuracy(smashed, data)
        rows.append(MetricRow("accuracy", "accuracy", base_acc, smashed_acc, "higher"))
        verdicts.append(f"accuracy {base_acc:.4f} -> {smashed_acc:.4f} ({100 * (smashed_acc - base_acc):+.2f} points)")
    rows.extend(cover_rows)
    verdicts.extend(cover_verdicts)
    rows.extend(extra_rows)
    if fid is not None:
        verdicts.append(
            f"fidelity: cosine mean {fid.cosine_mean:.4f}, min {fid.cosine_min:.4f}, max abs diff {fid.max_abs:.3g}"
        )
    verdicts.extend(best.notes)
    return Comparison(rows=rows, verdicts=verdicts, threads=threads)
