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

from slimkit.compression.formats import COMPRESSED_TENSORS, GPTQ
from slimkit.compression.quantization.experts import DOWN, FIRST
from slimkit.compression.quantization.lowbit.experts import PackedExperts
from slimkit.compression.quantization.lowbit.linear import PackedLinear

SLIMKIT = "slimkit"
#: a slimkit folder whose weights are one ``model.gguf`` (the ``llama_cpp`` compiler's output)
GGUF = "gguf"


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


def symmetric_grid(module: PackedLinear | PackedExperts) -> bool:
    """Whether a packed layer (or experts module) uses the symmetric grid: every zero point is the middle code."""
    mid = 1 << (module.bits - 1)
    zeros = [module.zeros] if isinstance(module, PackedLinear) else [module.packed(w)[2] for w in (FIRST, DOWN)]
    return all(bool((z.float() == mid).all()) for z in zeros)


def _grid_key(module: PackedLinear | PackedExperts, whole: bool, awq: bool) -> str:
    return (f"{module.bits}-bit, {'one group per row' if whole else f'groups of {module.group_size}'}, "
            f"{'symmetric' if symmetric_grid(module) else 'asymmetric'}" + (", AWQ input scale" if awq else ""))


def _grid(model: nn.Module) -> tuple[list[str], list[str]]:
    """(one line per distinct packed grid with its layer count, names of the float Linear layers).

    MoE experts modules packed expert by expert count apart, with their number of experts.
    """
    counts: dict[str, int] = {}
    for module in model.modules():
        if isinstance(module, PackedLinear):
            label = f"layer(s): {_grid_key(module, module.scales.shape[1] == 1, module.input_scale is not None)}"
        elif isinstance(module, PackedExperts):
            whole = all(module.packed(w)[1].shape[-1] == 1 for w in (FIRST, DOWN))
            label = (f"MoE experts module(s) of {module.layout.num_experts} experts: "
                     f"{_grid_key(module, whole, bool(module.input_scale))}")
        else:
            continue
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


def _gguf_line(model: nn.Module, fmt: str) -> str:
    how = ("`slimkit smash --model DIR --algorithm llama_cpp` (or a SmashConfig with the `llama_cpp` compiler) "
           "writes `model.gguf`")
    try:
        from slimkit.compression.gguf import architecture, block_type
    except ImportError:  # gguf not installed: state the rule instead of checking it
        return (f"- **llama.cpp**: {how} when every packed layer is 4-bit (or 8-bit symmetric) with groups of a "
                "multiple of 32 (needs `pip install 'slimkit[llamacpp]'`).")
    try:
        architecture(model)
        types = {block_type(m, n).name for n, m in model.named_modules() if isinstance(m, PackedLinear)}
    except Exception as exc:  # noqa: BLE001 - any refusal is the answer for this line
        return f"- **llama.cpp**: not for this folder: {str(exc)[:300]}"
    kinds = ", ".join(sorted(types)) or "F32/F16"
    exact = ("the same codes and scales, no re-quantization; Q4_1 rounds each block's minimum -zero*scale to fp16, "
             "under 0.73 % of a step" if "Q4_1" in types else "bit for bit, no re-quantization")
    if fmt == SLIMKIT:
        return f"- **llama.cpp**: load this folder in slimkit and compile it with `llama_cpp`: {how} ({kinds}: " \
               f"{exact})."
    return f"- **llama.cpp**: {how} from this folder ({kinds}: {exact})."


def _loading(model: nn.Module, fmt: str) -> list[str]:
    slim = "- **slimkit**: `SmashedModel.from_pretrained(\"DIR\")`, `slimkit serve DIR`"
    if fmt == GGUF:
        return [
            slim + " (runs `model.gguf` with llama.cpp through llama-cpp-python).",
            "- **llama.cpp**: `llama-cli -m DIR/model.gguf`, or any GGUF runtime (the file holds the weights and the "
            "tokenizer).",
            "- **transformers**, **vLLM**: not this folder; write the compressed-tensors format instead (`slimkit "
            "smash ... --format compressed-tensors`, or `save_pretrained(DIR, format=\"compressed-tensors\")`).",
        ]
    if fmt == SLIMKIT:
        return [
            slim + " (this is slimkit's own format).",
            "- **transformers**: not directly (slimkit's packed layers are its own); save with "
            "`save_pretrained(DIR, format=\"compressed-tensors\")` for a folder transformers and vLLM open.",
            "- **vLLM**: not this folder; export to `compressed-tensors` or `gptq` first.",
            _gguf_line(model, fmt),
        ]
    if fmt == COMPRESSED_TENSORS:
        return [
            slim + " (runs the packed weights on slimkit's CPU kernel; no re-quantization).",
            "- **transformers** (`pip install compressed-tensors`): `AutoModelForCausalLM.from_pretrained(\"DIR\", "
            "quantization_config=CompressedTensorsConfig(dequantize=True))`; symmetric schemes also load with a plain "
            "`from_pretrained(\"DIR\")` (checked with transformers 5.24 + compressed-tensors 0.20).",
            "- **vLLM**: `vllm serve DIR` (compressed-tensors `pack-quantized` weight-only int4/int8, the layout "
            "llm-compressor writes; not run in slimkit's own tests).",
            _gguf_line(model, fmt),
        ]
    return [
        slim + " (runs the packed weights on slimkit's CPU kernel; no re-quantization).",
        "- **transformers**: `AutoModelForCausalLM.from_pretrained(\"DIR\")` through its GPTQ loader, which needs "
        "`optimum` and `gptqmodel`.",
        "- **vLLM**: `vllm serve DIR` (GPTQ, `checkpoint_format: gptq`; not run in slimkit's own tests).",
        _gguf_line(model, fmt),
    ]


_FORMAT_TITLES = {SLIMKIT: "slimkit format", GGUF: "GGUF in a slimkit folder"}


def build_card(smashed: Any, fmt: str = SLIMKIT, measurements: dict[str, Any] | None = None) -> str:
    """The README.md text for ``smashed`` saved in format ``fmt`` (``"slimkit"``, ``"gguf"``, compressed-tensors, gptq).

    A slimkit save whose model the ``llama_cpp`` compiler made is described as the GGUF folder it is.
    """
    model = smashed.model
    if fmt == SLIMKIT and any(r.get("name") == "llama_cpp" for r in smashed.applied):
        fmt = GGUF  # the llama_cpp compiler saves its GGUF file as the folder's weights
    grids, floats = _grid(model) if isinstance(model, nn.Module) else ([], [])
    source = smashed.base_spec.get("source") or {}
    tags = [SLIMKIT] + ([fmt] if fmt != SLIMKIT else []) + sorted({r["name"] for r in smashed.applied})
    library = "transformers" if fmt in (COMPRESSED_TENSORS, GPTQ) else SLIMKIT
    arch = smashed.base_spec.get("hf_class") or type(model).__name__
    lines = ["---", f"library_name: {library}", "tags:"] + [f"- {t}" for t in tags] + ["---", "",
             f"# {arch}, {', '.join(smashed.algorithms) or 'imported'} ({_FORMAT_TITLES.get(fmt, fmt)})",
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
    lines += ["## Measured", "", *_measured(measurements), "", "## How to load", "", *_loading(model, fmt), ""]
    return "\n".join(lines)


def measurement_record(comparison: Any, threads: int) -> dict[str, Any]:
    """What the card shows from a :class:`slimkit.evaluation.Comparison`: rows, verdicts, CPU, threads, date."""
    data = comparison.to_dict()
    return {"rows": data["rows"], "verdicts": data["verdicts"], "threads": threads, "cpu": cpu_description(),
            "date": datetime.date.today().isoformat()}


__all__ = ["build_card", "cpu_description", "measurement_record", "symmetric_grid"]
