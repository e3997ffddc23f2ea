"""The README.md model card written into every saved folder (the Hugging Face convention).

It says what was done (algorithms, hyperparameters, quantized layers and their grid, what stayed float), what
the CLI measured (before/after rows, with the CPU and thread count), and how to load the folder in slimkit,
transformers, vLLM and llama.cpp: each line written for the folder's own format, saying plainly where a runtime
cannot open it.
"""

from __future__ import annotations

import datetime
import json
import platform
from pathlib import Path
from typing import Any

from torch import nn

from slimkit.formats import FORMATS, SLIMKIT, get_format, layer_kind
from slimkit.formats.kinds import PACKED, PACKED_EXPERTS, made_by


def cpu_description() -> str:
    """``"AMD EPYC 7B13 (AVX2, no AVX-512)"``-style name of this machine's CPU (best effort)."""
    name, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not name:
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    if not flags:
        return name
    isa = "AVX-512" + (" VNNI" if "avx512_vnni" in flags else "") if "avx512f" in flags else \
        ("AVX2, no AVX-512" if "avx2" in flags else "no AVX2")
    return f"{name} ({isa}{', AMX' if 'amx_int8' in flags else ''})"


def _grid(model: nn.Module) -> tuple[list[str], list[str]]:
    """(one line per distinct packed grid with its layer count, names of the float Linear layers).

    MoE experts modules packed expert by expert count apart, with their number of experts.
    """
    counts: dict[str, int] = {}
    for m in model.modules():
        if (kind := layer_kind(m)) is not None and kind.kind in (PACKED, PACKED_EXPERTS):
            what = "layer(s)" if kind.kind == PACKED else f"MoE experts module(s) of {m.layout.num_experts} experts"
            label = f"{what}: {kind.describe()}"
            counts[label] = counts.get(label, 0) + 1
    floats = [n for n, m in model.named_modules() if n and type(m) is nn.Linear]
    return [f"{n} {k}" for k, n in counts.items()], floats


def _recipe(smashed: Any) -> list[str]:
    lines = []
    for record in smashed.applied:
        hps = smashed.smash_config.hyperparameters_of(record["name"])
        shown = ", ".join(f"`{k}={json.dumps(v)}`" for k, v in sorted(hps.items()))
        took = f" ({record['seconds']:.1f} s)" if isinstance(record.get("seconds"), (int, float)) else ""
        lines.append(f"| {record['group']} | `{record['name']}`{took} | {shown or '-'} |")
    return lines


def _measured(measurements: dict[str, Any] | None) -> list[str]:
    if not measurements:
        return ["No before/after figures were recorded for this folder (it was saved by `save_pretrained`, not "
                "measured by `slimkit smash`)."]
    lines = [f"Measured by `slimkit smash` on {measurements.get('cpu', 'an unnamed CPU')}, "
             f"{measurements.get('threads', '?')} threads, {measurements.get('date', '')}:", "",
             "| metric | base | smashed | ratio |", "|---|---:|---:|---:|"]
    for row in measurements.get("rows", []):
        ratio = row.get("ratio")
        lines.append(f"| {row.get('label')} | {_num(row.get('base'))} | {_num(row.get('smashed'))} | "
                     f"{'' if ratio is None else f'{ratio:.3g}x'} |")
    lines += [""] + [f"- {v}" for v in measurements.get("verdicts", [])]
    return lines


def _num(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    return f"{int(value):,}" if isinstance(value, (int, float)) else str(value)


def build_card(smashed: Any, fmt: str = SLIMKIT, measurements: dict[str, Any] | None = None) -> str:
    """The README.md text for ``smashed`` saved in format ``fmt`` (a name in :data:`slimkit.formats.FORMATS`).

    A slimkit save whose model a compiler turned into a file of another format (it declares it as its
    ``stream_format``, e.g. GGUF) is described as the folder of that format it is.
    """
    model = smashed.model
    if fmt == SLIMKIT:
        fmt = next((f for r in smashed.applied for f in FORMATS if r.get("name") in made_by(f)), fmt)
    checkpoint_format = get_format(fmt)
    grids, floats = _grid(model) if isinstance(model, nn.Module) else ([], [])
    source = smashed.base_spec.get("source") or {}
    tags = [SLIMKIT] + ([fmt] if fmt != SLIMKIT else []) + sorted({r["name"] for r in smashed.applied})
    library = checkpoint_format.library
    arch = smashed.base_spec.get("hf_class") or type(model).__name__
    lines = ["---", f"library_name: {library}", "tags:"] + [f"- {t}" for t in tags] + ["---", "",
             f"# {arch}, {', '.join(smashed.algorithms) or 'imported'} ({checkpoint_format.title})",
             "", f"Saved by slimkit on {datetime.date.today().isoformat()} in the **{fmt}** format.", ""]
    if source:
        lines += [f"Imported from a {source.get('format')} checkpoint made by another tool ({source.get('path')}); "
                  "its quantized weights are used as they are (no re-quantization).", ""]
    lines += ["## How it was made", ""]
    if smashed.applied:
        lines += ["| group | algorithm | hyperparameters |", "|---|---|---|", *_recipe(smashed), ""]
    else:
        lines += ["No slimkit algorithm ran on this model.", ""]
    if grids:
        lines += ["Quantized layers (weights stored packed, `w = (q - zero) * scale` per group):", ""]
        lines += [f"- {g}" for g in grids]
        lines += [f"- kept in float: {', '.join(floats) if floats else 'none'}", ""]
    lines += ["## Measured", "", *_measured(measurements), "", "## How to load", "",
              *checkpoint_format.loading(model), ""]
    return "\n".join(lines)


def measurement_record(comparison: Any, threads: int) -> dict[str, Any]:
    """What the card shows from a :class:`slimkit.evaluation.Comparison`: rows, verdicts, CPU, threads, date."""
    data = comparison.to_dict()
    return {"rows": data["rows"], "verdicts": data["verdicts"], "threads": threads, "cpu": cpu_description(),
            "date": datetime.date.today().isoformat()}


__all__ = ["build_card", "cpu_description", "measurement_record"]
