"""Bar charts of comparisons (speedup, size reduction, fidelity) written as PNG files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from slimkit.core.io import atomic_file
from slimkit.errors import ConfigError, MissingPackageError
from slimkit.evaluation.report import SIZE_TOLERANCE, SPEEDUP_THRESHOLD, Comparison

_PANELS = (  # (row key, value to plot, title, reference line, pass threshold: green at or above, else red)
    ("latency_ms", "ratio", "speedup (base / smashed latency)", SPEEDUP_THRESHOLD, SPEEDUP_THRESHOLD),
    ("size_bytes", "ratio", "size reduction (base / smashed bytes)", 1.0, 1.0 + SIZE_TOLERANCE),
    ("cosine_mean", "smashed", "fidelity (cosine mean vs base)", 1.0, None),
)


def _matplotlib() -> tuple[Any, Any]:
    try:
        import matplotlib  # noqa: F401  (imported first so a missing package is reported clearly)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingPackageError(
            "plot_comparison needs matplotlib, which is not installed; "
            "install it with `pip install 'slimkit[eval]'` (or `pip install matplotlib`)."
        ) from exc
    return Figure, FigureCanvasAgg


def _value(comparison: Comparison, key: str, attr: str) -> float:
    try:
        value = getattr(comparison.row(key), attr)
    except KeyError:
        return float("nan")
    return float("nan") if value is None else float(value)


def plot_comparison(comparisons: dict[str, Comparison], path: str | os.PathLike) -> Path:
    """Write a PNG with one bar per comparison in three panels: speedup, size reduction, fidelity.

    Dashed lines mark the honest thresholds (1.05x speedup, 1x size, cosine 1). Uses matplotlib's Agg
    canvas directly (no global backend change) and writes atomically. Returns the written path.
    """
    if not isinstance(comparisons, dict) or not comparisons:
        raise ConfigError(
            f"plot_comparison needs a non-empty dict name -> Comparison, got {comparisons!r}; "
            "e.g. plot_comparison({'int8_dynamic': compare(base, smashed, x)}, 'out.png')."
        )
    for name, comp in comparisons.items():
        if not isinstance(comp, Comparison):
            raise ConfigError(
                f"comparisons[{name!r}] must be a Comparison (from compare()), got {type(comp).__name__}."
            )
    target = Path(path)
    if target.suffix.lower() != ".png":
        raise ConfigError(f"plot_comparison writes PNG files; got path {str(target)!r}. Use a path ending in '.png'.")
    figure_cls, canvas_cls = _matplotlib()

    names = list(comparisons)
    fig = figure_cls(figsize=(4.2 * len(_PANELS), 0.5 * len(names) + 2.5), dpi=100)
    canvas_cls(fig)
    axes = fig.subplots(1, len(_PANELS), sharey=True)
    for ax, (key, attr, title, ref, passing) in zip(axes, _PANELS, strict=True):
        values = [_value(comparisons[n], key, attr) for n in names]
        # NaN compares False: an unmeasured value is red
        colors = ["tab:blue" if passing is None else "tab:green" if v >= passing else "tab:red" for v in values]
        finite = [v for v in values if v == v and v != float("inf")]
        bars = ax.barh(names, [v if v in finite else 0.0 for v in values], color=colors)
        ax.set_xlim(0, 1.25 * max([ref, *finite]))
        ax.axvline(ref, color="black", linestyle="--", linewidth=1)
        for bar, v in zip(bars, values, strict=True):
            label = "n/a" if v != v else f"{v:.4g}"
            ax.annotate(
                label,
                (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
        ax.set_title(title, fontsize=9)
    axes[0].invert_yaxis()  # first comparison on top (the y axis is shared)
    threads = {c.threads for c in comparisons.values()}
    fig.suptitle(f"slimkit comparison (latency at {', '.join(map(str, sorted(threads)))} threads)", fontsize=10)
    fig.tight_layout()

    with atomic_file(target, suffix=".png") as tmp:
        fig.savefig(tmp, format="png")
    return target
