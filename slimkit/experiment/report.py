"""What an experiment leaves behind: the results table, ``results.csv``/``results.json`` and PNG plots.

``finish`` runs at the end of ``slimkit run`` and again for ``slimkit report <folder>``: it reads the study from
the folder's journal, keeps only the best (or Pareto) models when ``save_model`` is on, and writes
``history.png`` (each objective per trial with the best so far), ``importance.png`` (how much each searched
parameter explains of each objective: Optuna's fANOVA importances) and, for several objectives, ``pareto.png``
(the measured front, its points labelled with their trial and recipe).
"""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from slimkit.core.contract import GROUPS
from slimkit.core.io import atomic_file, write_json_atomic
from slimkit.experiment.experiment_file import Experiment
from slimkit.experiment.storage import Store
from slimkit.experiment.study import finished, interrupted, kept_trials, open_study

#: the short names of the trial states in the rows and the table
_STATES = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed",
           TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}


@dataclass
class ExperimentResult:
    """The trials of an experiment as rows, the kept ones (best or Pareto set), and where the files are."""

    folder: Path
    objectives: dict[str, str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    importance: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def best(self) -> list[dict[str, Any]]:
        """Rows of the best trial (one objective) or of the Pareto front (several)."""
        return [r for r in self.rows if r["number"] in self.kept]

    def counts(self) -> dict[str, int]:
        """How many trials ended in each state."""
        out: dict[str, int] = {}
        for row in self.rows:
            out[row["state"]] = out.get(row["state"], 0) + 1
        return out


def label(params: dict[str, Any]) -> str:
    """A short recipe label: ``l1_filter sparsity=0.53 + int8_dynamic`` (a group shows its algorithm)."""
    parts: dict[str, list[str]] = {}
    for key, value in params.items():
        if key in GROUPS:
            parts.setdefault(str(value) if value is not None else key, []).insert(
                0, str(value) if value is not None else f"no {key}")
            continue
        owner = next((a for a in params.values() if isinstance(a, str) and key.startswith(a + "_")), None)
        shown = f"{value:.3g}" if isinstance(value, float) else str(value)
        if owner is not None:
            parts.setdefault(owner, []).append(f"{key[len(owner) + 1:]}={shown}")
        else:
            parts.setdefault(key, []).append(f"{key}={shown}")
    return " + ".join(" ".join(p) for p in parts.values()) or "(fixed)"


def progress_line(exp: Experiment, trials: list[FrozenTrial], n_samples: int) -> str:
    """``done 3/8 | running 1 | failed 0 | best accuracy=0.97 (trial 2)``: a live progress line."""
    done = finished(trials)
    running = sum(t.state == TrialState.RUNNING for t in trials)
    failed = sum(t.state == TrialState.FAIL for t in done)
    complete = [t for t in done if t.state == TrialState.COMPLETE]
    line = f"slimkit: done {len(done)}/{n_samples} | running {running} | failed {failed}"
    names = exp.objective_names
    if complete and len(names) == 1:
        pick = max if exp.directions[0] == "maximize" else min
        best = pick(complete, key=lambda t: t.values[0])
        line += f" | best {names[0]}={best.values[0]:.4g} (trial {best.number})"
    elif complete:
        line += f" | {len(complete)} measured"
    return line


def _rows(exp: Experiment, trials: list[FrozenTrial], kept: set[int]) -> list[dict[str, Any]]:
    rows = []
    # recipe labels show the groups (fixed or chosen) and the searched values; fixed hyperparameters are the same
    # in every trial and would only lengthen them
    fixed = {k: v for k, v in (exp.smash_space.fixed if exp.smash_space is not None else {}).items() if k in GROUPS}
    cut = interrupted(trials)
    for t in trials:
        if t.number in cut or t.state not in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL):
            continue
        values = dict(zip(exp.objective_names, t.values or [None] * len(exp.objective_names), strict=True))
        attrs = t.user_attrs
        trial_dir = attrs.get("trial_dir", "")
        row: dict[str, Any] = {
            "number": t.number, "state": _STATES[t.state], "params": dict(t.params),
            "recipe": label({**fixed, **t.params}), "kept": t.number in kept, "values": values,
            "measured": attrs.get("measured", {}),
            "seconds": (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete else None,
            "reason": attrs.get("reason", ""), "log_tail": attrs.get("log_tail", ""),
            "attempts": attrs.get("attempts", 1),
            "intermediate": {int(k): v for k, v in sorted(t.intermediate_values.items())}, "trial_dir": trial_dir,
            "model": str(Path(trial_dir) / "model") if trial_dir else ""}
        for name, value in values.items():  # row["accuracy"] too, unless the name is a column ("params")
            row.setdefault(name, value)
        rows.append(row)
    return rows


def _write_csv(path: Path, exp: Experiment, rows: list[dict[str, Any]]) -> Path:
    names = sorted({k for r in rows for k in r["params"]})
    header = ["number", "state", "kept", *exp.objective_names, *names, "seconds", "attempts", "reason", "model"]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    for r in rows:
        writer.writerow([r["number"], r["state"], r["kept"], *[r["values"][n] for n in exp.objective_names],
                         *[r["params"].get(n) for n in names], r["seconds"], r["attempts"], r["reason"],
                         r["model"] if r["kept"] and exp.save_model else ""])
    with atomic_file(path) as tmp:
        tmp.write_text(buffer.getvalue())
    return path


def _plots(folder: Path, exp: Experiment, rows: list[dict[str, Any]]) -> list[Path]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    done = [r for r in rows if r["state"] == "complete"]
    if not done:
        return []
    names = exp.objective_names
    fig = Figure(figsize=(5 * len(names), 3.6))
    for i, (name, direction) in enumerate(zip(names, exp.directions, strict=True)):
        ax = fig.add_subplot(1, len(names), i + 1)
        xs, ys = [r["number"] for r in done], [r["values"][name] for r in done]
        ax.scatter(xs, ys, s=18, label="trial")
        best, so_far = [], None
        for y in ys:
            so_far = y if so_far is None else (max(so_far, y) if direction == "maximize" else min(so_far, y))
            best.append(so_far)
        ax.step(xs, best, where="post", color="tab:red", label="best so far")
        ax.set_xlabel("trial")
        ax.set_ylabel(name)
        ax.set_title(f"{name} ({'max' if direction == 'maximize' else 'min'})")
        ax.legend(fontsize=7)
    fig.tight_layout()
    paths = [_save(fig, FigureCanvasAgg, folder / "history.png")]
    if len(names) >= 2:
        x_name, y_name = names[1], names[0]
        fig = Figure(figsize=(7, 5))
        ax = fig.add_subplot(1, 1, 1)
        xs_all, ys_all = [r["values"][x_name] for r in done], [r["values"][y_name] for r in done]
        ax.scatter(xs_all, ys_all, s=16, color="0.6", label="trial")
        front = sorted((r for r in done if r["kept"]), key=lambda r: r["values"][x_name])
        fx, fy = [r["values"][x_name] for r in front], [r["values"][y_name] for r in front]
        ax.plot(fx, fy, "o-", color="tab:red", label="Pareto front")
        for r, x, y in zip(front, fx, fy, strict=True):
            ax.annotate(f"#{r['number']} {r['recipe']}", (x, y), fontsize=6,
                        xytext=(4, 4), textcoords="offset points")
        ax.set_xlabel(f"{x_name} ({exp.objectives.get(x_name, '')})")
        ax.set_ylabel(f"{y_name} ({exp.objectives.get(y_name, '')})")
        ax.set_title(f"{exp.name}: measured Pareto front")
        ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(_save(fig, FigureCanvasAgg, folder / "pareto.png"))
    return paths


def importances(study: optuna.Study, exp: Experiment, seed: int = 0) -> dict[str, dict[str, float]]:
    """``{objective: {parameter: importance}}`` (Optuna's fANOVA, summing to 1), over the complete trials.

    Only parameters every complete trial has are compared (a hyperparameter of an algorithm some trials did not
    choose is left out); an objective gets ``{}`` with fewer than two complete trials or nothing varied.
    """
    out: dict[str, dict[str, float]] = {}
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    for i, name in enumerate(exp.objective_names):
        try:
            scores = optuna.importance.get_param_importances(
                study, target=lambda t, i=i: t.values[i],
                evaluator=optuna.importance.FanovaImportanceEvaluator(seed=seed))
        except (ValueError, RuntimeError):
            scores = {}
        out[name] = {k: float(v) for k, v in scores.items()} if len(complete) >= 2 else {}
    return out


def _importance_plot(folder: Path, names: list[str], scores: dict[str, dict[str, float]]) -> list[Path]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    shown = [n for n in names if scores.get(n)]
    if not shown:
        return []
    params = sorted({p for n in shown for p in scores[n]}, key=lambda p: -max(scores[n].get(p, 0) for n in shown))
    fig = Figure(figsize=(5 * len(shown), 1.2 + 0.35 * len(params)))
    for i, name in enumerate(shown):
        ax = fig.add_subplot(1, len(shown), i + 1)
        ax.barh(params[::-1], [scores[name].get(p, 0.0) for p in params[::-1]], color="tab:blue")
        ax.set_xlim(0, 1)
        ax.set_xlabel("importance (fANOVA)")
        ax.set_title(name)
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    return [_save(fig, FigureCanvasAgg, folder / "importance.png")]


def _save(fig: Any, canvas: Any, path: Path) -> Path:
    canvas(fig)
    with atomic_file(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    return path


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return "" if value is None else str(value)


def print_table(exp: Experiment, result: ExperimentResult) -> None:
    """The results table (rich when available): one row per trial, kept ones marked."""
    header = ["trial", "state", *exp.objective_names, "recipe", "note"]
    cells = [[str(r["number"]) + (" *" if r["kept"] else ""), r["state"],
              *[_fmt(r["values"][n]) for n in exp.objective_names],
              r["recipe"], r["reason"][:60]] for r in result.rows]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print("  ".join(header))
        for row in cells:
            print("  ".join(row))
    else:
        table = Table(title=f"{exp.name} — * = {'Pareto front' if len(exp.objective_names) > 1 else 'best'}")
        for column in header:
            table.add_column(column)
        for row in cells:
            table.add_row(*row)
        Console(width=160).print(table)
    counts = ", ".join(f"{v} {k}" for k, v in result.counts().items())
    print(f"slimkit: {len(result.rows)} trial(s): {counts}. Files: {', '.join(p.name for p in result.files)} "
          f"in {result.folder}")
    for name, scores in result.importance.items():
        if scores:
            ranked = ", ".join(f"{k} {v:.2f}" for k, v in sorted(scores.items(), key=lambda kv: -kv[1]))
            print(f"slimkit: parameter importance for {name} (fANOVA): {ranked}")
    for r in result.rows:
        if r["state"] == "failed" and r["log_tail"]:
            tail = "\n    ".join(r["log_tail"].splitlines()[-5:])
            tries = f" after {r['attempts']} attempts" if r.get("attempts", 1) > 1 else ""
            print(f"slimkit: trial {r['number']} failed{tries}: {r['reason']}; log tail:\n    {tail}")


def finish(folder: Path, exp: Experiment, quiet: bool = False, store: Store | None = None) -> ExperimentResult:
    """Read the study, keep the best/Pareto models, write CSV, JSON and plots, print the table."""
    study = open_study(folder, exp, store=store)
    kept = {t.number for t in kept_trials(study)}
    if exp.save_model:  # keep only the saved models of the best trial or the Pareto set
        for trial_dir in sorted((folder / "trials").glob("*")):
            if trial_dir.name.isdigit() and int(trial_dir.name) not in kept and (trial_dir / "model").exists():
                shutil.rmtree(trial_dir / "model")
    result = ExperimentResult(folder, exp.objectives or {"result": exp.target},
                              _rows(exp, study.get_trials(deepcopy=False), kept), sorted(kept))
    result.importance = importances(study, exp) if exp.params else {}
    payload = {"name": exp.name, "objectives": result.objectives, "kept": result.kept,
               "importance": result.importance, "trials": result.rows}
    result.files = [_write_csv(folder / "results.csv", exp, result.rows),
                    write_json_atomic(folder / "results.json", json.loads(json.dumps(payload, default=str))),
                    *_plots(folder, exp, result.rows),
                    *_importance_plot(folder, exp.objective_names, result.importance)]
    if not quiet:
        print_table(exp, result)
    return result
