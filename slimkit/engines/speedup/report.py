"""channel_dependency_report: which layers must be pruned together, as a list and a printable table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch import nn

from slimkit.engines._union_find import UnionFind

from .graph import ChannelGraph
from .tracer import trace_channels


@dataclass
class GroupInfo:
    """One coupled group: its producing layers, who follows/consumes it, and what pins it."""

    members: list[str]
    channels: int
    followers: list[str] = field(default_factory=list)
    consumers: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    kind: str = "channels"  # or "heads"


class ChannelGroups(list):
    """A list of groups (each a list of layer names that must be pruned together) with details and a table."""

    def __init__(self, infos: list[GroupInfo]) -> None:
        super().__init__([list(i.members) for i in infos])
        self.infos = infos

    def table(self, max_names: int = 4) -> str:
        """A plain-text table: one row per group (long member lists are cut after ``max_names`` names)."""
        rows = [("#", "kind", "channels", "layers pruned together", "followers", "consumers", "constraints")]
        for i, g in enumerate(self.infos):
            names = ", ".join(g.members[:max_names])
            if len(g.members) > max_names:
                names += f", ... (+{len(g.members) - max_names} more)"
            rows.append((str(i), g.kind, str(g.channels), names, str(len(g.followers)), str(len(g.consumers)),
                         "; ".join(g.constraints) or "-"))
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def groups_from_graph(graph: ChannelGraph) -> ChannelGroups:
    """Group the producers of ``graph`` by shared channel classes (a union-find over layers)."""
    roots = graph.uf.roots()
    spaces = [s for s in graph.spaces.values() if s.kind == "out"]
    space_roots = [np.unique(roots[space.ids]).tolist() for space in spaces]
    owner_of_root: dict[int, int] = {}
    layers = UnionFind()
    for i, rs in enumerate(space_roots):
        for r in rs:
            layers.union(i, owner_of_root.setdefault(r, i))
    by_group: dict[int, GroupInfo] = {}
    group_of_root: dict[int, GroupInfo] = {}
    for i, (space, rs) in enumerate(zip(spaces, space_roots, strict=True)):
        info = by_group.setdefault(layers.find(i), GroupInfo([], 0))
        info.members.append(space.owner)
        group_of_root.update(dict.fromkeys(rs, info))
    for info in by_group.values():
        info.channels = len({r for r, g in group_of_root.items() if g is info})
    for rec in graph.leaves.values():
        if rec.in_ids is None:
            continue
        hit = {id(group_of_root[r]): group_of_root[r] for r in np.unique(roots[rec.in_ids[rec.in_ids >= 0]]).tolist()
               if r in group_of_root}
        bucket = {"norm": "followers", "depthwise": "members"}.get(rec.kind, "consumers")
        for info in hit.values():
            getattr(info, bucket).append(rec.name)
    for pin in graph.pins:
        text = f"{pin.op} at {pin.location or '<output>'}" if pin.fatal else "kept: model output"
        for r in np.unique(roots[pin.ids]).tolist():
            info = group_of_root.get(r)
            if info is not None and text not in info.constraints:
                info.constraints.append(text)
    infos = list(by_group.values())
    for att in graph.attention.values():
        members = [n for n in (att.q, att.k, att.v, att.o) if n]
        layout = f"{att.num_heads} heads in {att.num_kv_heads} kv groups of {att.group_size}"
        infos.append(GroupInfo(members, att.num_kv_heads, kind="heads", constraints=[layout]))
    return ChannelGroups(infos)


def channel_dependency_report(model: nn.Module, dummy_input: Any) -> ChannelGroups:
    """Trace ``model`` and return the groups of layers whose output channels must be pruned together.

    Each group is a list of layer names; ``print(report)`` shows a table with the channel count, the norms
    that follow the group, the layers that consume it and any constraint (an op that pins it, the model
    output). Attention blocks appear as "heads" groups (q/k/v/o prune by whole kv-head group).
    """
    return groups_from_graph(trace_channels(model, dummy_input))
