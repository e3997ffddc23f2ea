"""Why a layer's channels cannot be removed, and what gets around it (the words of "nothing left to prune").

:func:`explain` looks a layer up in the channel coupling and returns the first thing that keeps its channels:
an op that pins them (with the layer it runs in), the model output, a producer it is tied to that cannot be
pruned or was left out of the selection, or a dimension that was not asked for. :func:`summarize` turns the
reasons for many layers into a few readable lines, one per cause.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from slimkit.engines.pruning.coupling import ChannelCoupling
from slimkit.engines.pruning.dims import DIMS


@dataclass(frozen=True)
class Blocker:
    """What keeps a layer's channels (``reason``) and how to get around it (``fix``, '' when nothing does)."""

    reason: str
    fix: str = ""


def _short(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return f"[{shown}{', ...' if len(names) > limit else ''}]" + (f" ({len(names)} layers)" if len(names) > limit
                                                                   else "")


def _pins(coupling: ChannelCoupling, group: int) -> list[str]:
    roots = coupling.graph.uf.roots()
    found = []
    for pin in coupling.graph.pins:
        if any(coupling.group_of(int(r)) == group for r in np.unique(roots[pin.ids])):
            text = ("its channels reach the model output, whose shape is kept" if pin.op == "model output" else
                    f"its channels flow into `{pin.op}` at '{pin.location or '<model>'}' ({pin.detail})")
            if text not in found:
                found.append(text)
    return found


def explain(coupling: ChannelCoupling, name: str, selected: Iterable[str], dims: Iterable[str] = DIMS,
            hp: Mapping[str, str] | None = None) -> Blocker:
    """Why ``name`` (a selected layer) is not shrinkable.

    ``hp`` names the knobs: keys ``dims``, ``exclude``, ``op_names``, ``speedup`` mapped to how the caller
    spells them (e.g. ``"cfg['l1_filter_dims']"``).
    """
    hp = {"dims": "dims", "exclude": "exclude", "op_names": "op_names", "speedup": "speedup", **(hp or {})}
    chosen, dims = set(selected), set(dims)
    graph = coupling.graph
    att = coupling.attention.get(name)
    if att is not None:
        if "heads" not in dims:
            return Blocker("it is the q/k/v projection of an attention block, pruned only by whole heads",
                           f"add 'heads' to {hp['dims']}")
        missing = [p for p in att.projections() if p not in chosen]
        return Blocker(f"whole heads of '{att.name}' go only with all of its q/k/v projections, and {missing} "
                       "are not selected", f"select them too (remove them from {hp['exclude']})")
    if name in graph.inner and name not in coupling.prunable:
        owner = graph.inner[name]
        kind = type(graph.leaves[owner].module).__name__ if owner in graph.leaves else "module"
        return Blocker(f"it runs inside '{owner}', a {kind} the speedup shrinks as one unit")
    if name not in graph.leaves and name not in coupling.prunable:
        return Blocker("it did not run on the example input, so its channels cannot be followed",
                       "give an example input that runs it")
    groups = coupling.groups.get(name)
    if not groups or (name not in coupling.prunable and name not in coupling.depthwise):
        return Blocker("its output channels are not produced as a Conv/Linear layer's rows")
    for group in sorted(groups):
        pins = _pins(coupling, group)
        output = [p for p in pins if p.startswith("its channels reach the model output")]
        if output:
            return Blocker(output[0])
        if pins:
            return Blocker("; ".join(pins), f"set {hp['speedup']} = False to keep its pruned channels as zeros instead")
        dim = coupling.group_dim(group)
        if dim not in dims:
            feeders = [p for p in coupling.members(group)[0] if p in coupling.passive]
            what = {"hidden": "the residual stream" + (f" fed by {feeders[0]!r}" if feeders else ""),
                    "mlp": "channels inside a block", "heads": "attention heads"}[dim]
            return Blocker(f"its channels are {what} (dimension '{dim}')", f"add '{dim}' to {hp['dims']}")
        for producer in coupling.members(group)[0]:
            if producer in coupling.prunable:
                if producer not in chosen:
                    return Blocker(f"its channels are tied to those of '{producer}', which is not selected",
                                   f"select '{producer}' too (remove it from {hp['exclude']})")
            elif producer in coupling.passive:
                if "hidden" not in dims:
                    return Blocker(f"its channels are the residual stream fed by '{producer}'",
                                   f"add 'hidden' to {hp['dims']}")
            else:
                owner = producer.partition("#")[0]
                rec = graph.leaves.get(owner)
                kind = type(rec.module).__name__ if rec is not None else "op"
                return Blocker(f"its channels are tied to those of '{owner}' (a {kind}), which the speedup cannot "
                               "prune")
    return Blocker("its channels are tied to layers that are not pruned")


def summarize(reasons: Mapping[str, Blocker]) -> str:
    """One line per distinct cause: the layers it keeps, why, and the way around it."""
    by_cause: dict[Blocker, list[str]] = {}
    for name, blocker in reasons.items():
        by_cause.setdefault(blocker, []).append(name)
    lines = []
    for blocker, names in by_cause.items():
        fix = f" — {blocker.fix}" if blocker.fix else ""
        lines.append(f"  {_short(names)}: {blocker.reason}{fix}.")
    return "\n".join(lines)
