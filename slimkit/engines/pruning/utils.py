"""Sensitivity analysis: how much a metric moves when one layer at a time is pruned, as data, table, plot."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from slimkit.core import registry
from slimkit.core.io import atomic_file
from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.config import PruningConfigError, resolve_config_list
from slimkit.errors import MissingPackageError, check_number

Sensitivity = dict[str, dict[float, float]]


def sensitivity_analysis(
    model: nn.Module,
    evaluate_fn: Callable[[nn.Module], float],
    sparsities: Sequence[float] = (0.25, 0.5, 0.75),
    op_types: Sequence[str] | None = None,
    op_names: Sequence[str] | None = None,
    pruner: str | type[Pruner] = "l1_filter",
    pruner_kwargs: Mapping[str, Any] | None = None,
) -> Sensitivity:
    """Prune each selected layer alone at each sparsity and record ``evaluate_fn(model)``.

    Layers are those ``[{"op_types": op_types or ["default"], "op_names": op_names}]`` selects for the
    pruner. The model is restored after every measurement (masks are never written into its weights), so it
    leaves this function unchanged. Returns ``{layer: {sparsity: metric}}`` in model order.
    """
    cls = registry.get(pruner).engine if isinstance(pruner, str) else pruner
    if not (isinstance(cls, type) and issubclass(cls, Pruner)):
        raise PruningConfigError(f"pruner must be a pruner name or a Pruner subclass, got {pruner!r}.")
    values = list(sparsities)
    if not values:
        raise PruningConfigError("sparsities is empty; give e.g. (0.25, 0.5, 0.75).")
    for s in values:
        check_number("Each sensitivity sparsity", s, 0, 1, open_low=True, open_high=True, error=PruningConfigError)
    selector: dict[str, Any] = {"sparsity": 0.0, "op_types": list(op_types) if op_types else ["default"]}
    if op_names:
        selector["op_names"] = list(op_names)
    layers = resolve_config_list(model, [selector], cls.default_op_types, cls.supported_op_types)
    result: Sensitivity = {}
    for layer in layers:
        result[layer] = {}
        for s in values:
            instance = cls(model, [{"sparsity": float(s), "op_names": [layer]}], **dict(pruner_kwargs or {}))
            try:
                instance.compress()
                result[layer][float(s)] = float(evaluate_fn(model))
            finally:
                instance.unwrap_model(apply_masks=False)
    return result


def format_sensitivity_table(result: Sensitivity, baseline: float | None = None, precision: int = 4) -> str:
    """Plain-text table: one row per layer, one column per sparsity (plus the unpruned baseline if given)."""
    sparsities = sorted({s for row in result.values() for s in row})
    header = ["layer"] + (["baseline"] if baseline is not None else []) + [f"s={s:g}" for s in sparsities]
    rows = [header]
    for layer, row in result.items():
        cells = [layer] + ([f"{baseline:.{precision}f}"] if baseline is not None else [])
        cells += [f"{row[s]:.{precision}f}" if s in row else "-" for s in sparsities]
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def plot_sensitivity(
    result: Sensitivity,
    path: str | os.PathLike,
    baseline: float | None = None,
    title: str = "Pruning sensitivity",
    metric_name: str = "metric",
) -> Path:
    """Draw one line per layer (metric against sparsity) into a PNG at ``path``; written atomically."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingPackageError("plot_sensitivity needs matplotlib: pip install 'slimkit[eval]'.") from exc
    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for layer, row in result.items():
        xs = sorted(row)
        ax.plot(xs, [row[x] for x in xs], marker="o", label=layer)
    if baseline is not None:
        ax.axhline(baseline, color="black", linestyle="--", linewidth=1, label="unpruned")
    ax.set_xlabel("sparsity of the layer")
    ax.set_ylabel(metric_name)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    fig.tight_layout()
    target = Path(path)
    with atomic_file(target, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return target
