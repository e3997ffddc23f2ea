"""Generate the algorithm reference (docs/algorithms.md and the README table) from the registry."""

from __future__ import annotations

from pathlib import Path

from slimkit.core import registry
from slimkit.core.contract import GROUPS
from slimkit.core.io import atomic_file

README_START = "<!-- algorithms:start -->"
README_END = "<!-- algorithms:end -->"


def summary_table() -> str:
    """Markdown table: one row per algorithm with group, devices, requirements and description."""
    lines = ["| algorithm | group | devices | needs | what it does |", "|---|---|---|---|---|"]
    for group in GROUPS:
        for name in registry.by_group(group):
            i = registry.info(name)
            needs = ", ".join(i["requires"]) or "—"
            lines.append(f"| `{name}` | {group} | {', '.join(i['devices'])} | {needs} | {i['description']} |")
    return "\n".join(lines)


def algorithms_markdown() -> str:
    """The whole docs/algorithms.md page."""
    parts = [
        "# Algorithm reference",
        "",
        "Generated from the registry by `slimkit algorithms --markdown > docs/algorithms.md`; a test fails when "
        "this page is stale. Hyperparameters are set on a `SmashConfig` with the algorithm's name as prefix, "
        "e.g. `cfg[\"int8_dynamic_per_channel\"] = True`. Every name below (and its aliases: NNI class names, short "
        "names) means the same algorithm in a SmashConfig, an experiment's `compressor`, `create_compressor` and "
        "the razor builder.",
        "",
        summary_table(),
    ]
    for group in GROUPS:
        for name in registry.by_group(group):
            i = registry.info(name)
            parts += ["", f"## `{name}` ({group})", "", i["description"], ""]
            if i["aliases"]:
                parts.append(f"- also named: {', '.join(f'`{a}`' for a in i['aliases'])} (every face accepts these)")
            if i["engine"]:
                parts.append(f"- NNI-face engine: `{i['engine']}`")
            parts.append(f"- experiment type: `{i['kind']}`")
            parts.append(f"- devices: {', '.join(i['devices'])}")
            parts.append(f"- needs: {', '.join(i['requires']) or 'nothing beyond the model'}")
            parts.append(f"- saved as: `{i['save_fn']}`")
            if i["references"]:
                parts.append("- references: " + ", ".join(f"[{k}]({v})" for k, v in i["references"].items()))
            if i["hyperparameters"]:
                parts += ["", "| hyperparameter | default | allowed | description |", "|---|---|---|---|"]
                for hp in i["hyperparameters"]:
                    parts.append(f"| `{hp['name']}` | `{hp['default']!r}` | {hp['allowed']} | {hp['desc']} |")
    return "\n".join(parts) + "\n"


def update_readme(readme: Path) -> bool:
    """Rewrite the README's generated algorithm table in place; return whether it changed."""
    text = readme.read_text()
    start, end = text.index(README_START) + len(README_START), text.index(README_END)
    new = text[:start] + "\n" + summary_table() + "\n" + text[end:]
    if new != text:
        with atomic_file(readme) as tmp:
            tmp.write_text(new)
    return new != text
