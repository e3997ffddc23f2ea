"""The coverage record every weight quantizer stores with its result, and the refusal it gives when it finds nothing.

Built on :mod:`slimkit.core.weights` (what a target is): :func:`coverage` says what a quantizer replaced and
every target it left with the reason; :func:`coverage_summary` is its human form for tables and reports;
:func:`refusal` is the message of a quantizer that found nothing to take, naming the types the model has.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from slimkit.core.selection import matches
from slimkit.core.weights import EXCLUDED, KEPT_BY_DESIGN, UNSUPPORTED, Target

__all__ = ["coverage", "coverage_summary", "refusal"]


def _types(targets: Iterable[Target]) -> str:
    counts = Counter(f"{t.type_name} ({t.kind})" for t in targets)
    return ", ".join(f"{n} x {what}" for what, n in counts.most_common())


def refusal(targets: Sequence[Target], kinds: Iterable[str], exclude: Sequence[str] = (), what: str = "") -> str:
    """Why :func:`select` found nothing: the target types found and what ruled each group out.

    ``what`` names the quantizer for the message. Ends with how to fix it.
    """
    wanted = set(kinds)
    head = f"{what}: no layer to quantize" if what else "No layer to quantize"
    if not targets:
        return (f"{head}: the model has no nn.Linear (or subclass), transformers Conv1D or MoE expert weights; "
                "found none of the layer kinds any weight quantizer handles.")
    groups: list[tuple[list[Target], str]] = []
    other = [t for t in targets if t.kind not in wanted]
    if other:
        groups.append((other, f"not handled by this quantizer (it handles {', '.join(sorted(wanted))})"))
    unsupported = [t for t in targets if t.kind in wanted and t.unsupported]
    if unsupported:
        reasons = sorted({(t.unsupported or "").removeprefix(f"{UNSUPPORTED}: ") for t in unsupported})
        groups.append((unsupported, f"unsupported ({'; '.join(reasons)})"))
    excluded = [t for t in targets if t.kind in wanted and not t.unsupported and matches(t.name, exclude)]
    if excluded:
        groups.append((excluded, f"excluded by {list(exclude)}"))
    if len(groups) == 1:
        found = f"found {_types(targets)}, all {groups[0][1]}"
    else:
        found = "found " + "; ".join(f"{_types(g)} {why}" for g, why in groups)
    fix = " Loosen the 'exclude' patterns." if excluded else ""
    return f"{head}: {found}.{fix}"


def coverage(
    model_targets: Sequence[Target],
    quantized: Iterable[str],
    exclude: Sequence[str] = (),
    default_exclude: Sequence[str] = (),
    reasons: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The coverage record a quantizer stores with its result (JSON-ready).

    ``model_targets`` are the targets found *before* quantizing; ``quantized`` the names it replaced. Each other
    target gets a reason: ``reasons[name]`` when the quantizer gave one, else "kept by design" for a default
    exclusion the user did not change (``lm_head``), "excluded by the user's pattern" for the user's patterns,
    the target's unsupported reason, or "unsupported: <type> not handled by this quantizer".
    """
    done = set(quantized)
    reasons = dict(reasons or {})
    taken: dict[str, int] = {}
    left: list[dict[str, Any]] = []
    for t in model_targets:
        if t.name in done:
            taken[t.name] = t.numel
            continue
        if t.name in reasons:
            why = reasons[t.name]
        elif t.unsupported:
            why = t.unsupported
        elif default_exclude and matches(t.name, default_exclude) and tuple(exclude) == tuple(default_exclude):
            why = f"{KEPT_BY_DESIGN} (default exclude {list(default_exclude)})"
        elif matches(t.name, exclude):
            why = f"{EXCLUDED} {[p for p in exclude if matches(t.name, [p])]}"
        else:
            why = f"{UNSUPPORTED}: {t.type_name} ({t.kind}) is not handled by this quantizer"
        left.append({"name": t.name, "params": t.numel, "reason": why})
    total = sum(t.numel for t in model_targets)
    done_params = sum(taken.values())
    excluded = sum(x["params"] for x in left if x["reason"].startswith((EXCLUDED, KEPT_BY_DESIGN)))
    kinds: dict[str, dict[str, int]] = {}
    for t in model_targets:
        entry = kinds.setdefault(t.kind, {"targets": 0, "params": 0, "quantized_params": 0})
        entry["targets"] += 1
        entry["params"] += t.numel
        entry["quantized_params"] += taken.get(t.name, 0)
    eligible = total - excluded
    return {
        "quantized_layers": len(taken),
        "quantized_params": done_params,
        "linear_like_params": total,
        "share": round(done_params / total, 6) if total else 0.0,
        "excluded_params": excluded,
        "share_not_excluded": round(done_params / eligible, 6) if eligible else 0.0,
        "by_kind": kinds,
        "left": left,
    }


def _params(n: int) -> str:
    return f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n / 1e3:.3g}k" if n >= 1e3 else str(n)


def _names(names: list[str], shown: int = 2) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def coverage_summary(record: dict[str, Any]) -> list[str]:
    """Human lines for a :func:`coverage` record: what was quantized, then each reason with the layers it left."""
    total = int(record.get("linear_like_params", 0))
    lines = [f"quantized {record.get('quantized_layers', 0)} layers, {_params(int(record.get('quantized_params', 0)))}"
             f" of {_params(total)} Linear-like parameters ({100 * float(record.get('share', 0.0)):.1f}%; "
             f"{100 * float(record.get('share_not_excluded', record.get('share', 0.0))):.1f}% of those not excluded)"]
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for item in record.get("left", []):
        by_reason.setdefault(str(item["reason"]), []).append(item)
    for reason, items in by_reason.items():
        params = sum(int(i["params"]) for i in items)
        lines.append(f"left {len(items)} ({_params(params)} params: {_names([str(i['name']) for i in items])}): "
                     f"{reason}")
    return lines
