"""Deciding which channels survive: reconcile masks within coupled groups, honour pins, list the result.

Rules, in order:
1. Every producer votes per output channel: a masked layer keeps the rows its mask keeps (an embedding its
   columns, a MoE experts module the hidden rows of ``down_proj`` and each expert's intermediate channels),
   an unmasked layer keeps all (it was excluded from pruning). A depthwise or grouped conv votes only when
   it has a mask (its channels are its input's). An attention block votes per kv-head group: a group goes
   when every masked q/k/v row of it is zero (and no unmasked projection keeps it). Per-channel
   parameters of traced-through modules never vote: they follow their channels.
2. A class of coupled channels (residual add, elementwise product, concat pieces...) is removed only
   when no vote keeps any member: the union of kept channels.
3. Pinned channels stay. If a mask wanted one removed and the pin comes from an op the speedup cannot
   shrink, that is an :class:`UnsupportedOpError`; pins for the model output only warn.
4. No layer is left with zero channels (its first channel is kept, with a warning).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import UnsupportedOpError
from .graph import ChannelGraph
from .kept import PRUNABLE, KeptChannels, kept_channels
from .masks import LayerMask

MASKABLE = PRUNABLE | {"embedding", "experts"}
FOLLOWS_INPUT = {"depthwise", "grouped_conv"}


@dataclass
class ShrinkPlan:
    """The kept channels per layer (``kept``, JSON-ready), the per-id decision and what was not honoured."""

    kept: KeptChannels
    keep_id: np.ndarray
    warnings: list[str] = field(default_factory=list)


def _check_mask_names(graph: ChannelGraph, masks: dict[str, LayerMask], warnings: list[str]) -> None:
    children = {getattr(a, p): a for a in graph.attention.values() for p in ("q", "k", "v", "o") if getattr(a, p)}
    for name in masks:
        rec = graph.leaves.get(name)
        if rec is not None and rec.kind not in MASKABLE:
            raise UnsupportedOpError(type(rec.module).__name__, name, [name], "only the output channels of Conv, "
                                     "Linear, Embedding and MoE experts layers can be pruned")
        if rec is None and name not in children:
            owner = graph.inner.get(name)
            if owner is not None:
                kind = type(graph.leaves[owner].module).__name__ if owner in graph.leaves else "module"
                raise UnsupportedOpError(kind, owner, [name], "the layer runs inside a module the speedup "
                                         "treats as one unit")
            warnings.append(f"{name}: never ran on dummy_input, so its mask was ignored.")


def _attention_votes(graph: ChannelGraph, masks: dict[str, LayerMask], warnings: list[str]) -> dict[str, np.ndarray]:
    """Per attention block, which kv-head groups the masks keep."""
    out = {}
    for att in graph.attention.values():
        keep = np.zeros(att.num_kv_heads, dtype=bool)
        for layer, group in att.row_groups().items():
            rows = masks[layer].rows_keep if layer in masks else np.ones(len(group), dtype=bool)
            np.logical_or.at(keep, group, rows)
        if not keep.any():
            warnings.append(f"{att.name}: every attention head was pruned; keeping kv-head group 0.")
            keep[0] = True
        out[att.name] = keep
    return out


def make_plan(graph: ChannelGraph, masks: dict[str, LayerMask]) -> ShrinkPlan:
    """Decide the kept channels of every traced layer from ``masks``."""
    warnings: list[str] = []
    _check_mask_names(graph, masks, warnings)
    n = len(graph.uf.parent)
    roots = graph.uf.roots()
    voted, vote = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    groups = _attention_votes(graph, masks, warnings)
    for space in graph.spaces.values():
        if space.kind == "heads":
            att = graph.attention[space.owner]
            rows = np.repeat(np.repeat(groups[att.name], att.group_size), att.head_dim)
            if not np.isin(roots, np.unique(roots[space.ids])).sum() == len(space.ids):
                rows[:] = True  # the heads' channels are tied to other layers: keep them all
            vote[space.ids], voted[space.ids] = rows, True
        elif space.votes:
            mask = masks.get(space.owner)
            keep = None if mask is None else mask.inner_keep if space.kind == "inner" else mask.rows_keep
            vote[space.ids] |= True if keep is None else keep.reshape(-1)
            voted[space.ids] = True
    for rec in graph.leaves.values():
        if rec.kind in FOLLOWS_INPUT and rec.name in masks:
            ok = rec.out_ids >= 0
            np.logical_or.at(vote, rec.out_ids[ok], masks[rec.name].rows_keep[ok])
            voted[rec.out_ids[ok]] = True
    class_keep = np.zeros(n, dtype=bool)
    follows = np.zeros(n, dtype=bool)  # parameter ids: they neither keep nor drop a class
    for space in graph.spaces.values():
        follows[space.ids] |= not space.votes
    np.logical_or.at(class_keep, roots, vote | (~voted & ~follows))
    class_voted = np.zeros(n, dtype=bool)
    np.logical_or.at(class_voted, roots, voted)
    class_keep |= ~class_voted
    output_roots: set[int] = set()  # classes a mask wanted gone but the model output keeps
    for pin in graph.pins:
        dropped = np.unique(roots[pin.ids])[~class_keep[np.unique(roots[pin.ids])]]
        if dropped.size:
            layers = [m for m in masks if (ids := _out_ids(graph, m)) is not None and
                      np.isin(roots[ids[ids >= 0]], dropped).any()]
            if pin.fatal:
                raise UnsupportedOpError(pin.op, pin.location, layers or graph.owners_of(pin.ids, roots),
                                         pin.detail)
            output_roots.update(dropped.tolist())
        class_keep[roots[pin.ids]] = True
    keep_id = class_keep[roots]
    for space in graph.spaces.values():  # never leave a layer with no channels
        if space.votes and not keep_id[space.ids].any():
            warnings.append(f"{space.owner}: every channel was pruned; keeping channel 0 so the layer still works.")
            class_keep[roots[space.ids[0]]] = True
            keep_id = class_keep[roots]
    _round_up_heads(graph, keep_id)
    _even_experts(graph, keep_id, warnings)
    kept = kept_channels(graph, keep_id, groups)
    _explain(graph, masks, kept, roots, output_roots, warnings)
    return ShrinkPlan(kept, keep_id, warnings)


def _out_ids(graph: ChannelGraph, name: str) -> np.ndarray | None:
    """The ids of layer ``name``'s output channels (-1 where no layer produces them), or None."""
    space, rec = graph.spaces.get(f"{name}#out"), graph.leaves.get(name)
    return space.ids if space is not None else rec.out_ids if rec is not None else None


def _even_experts(graph: ChannelGraph, keep_id: np.ndarray, warnings: list[str]) -> None:
    """3-D expert weights need the same intermediate size in every expert: keep the strongest extra channels."""
    for space in graph.spaces.values():
        if space.kind != "inner":
            continue
        experts = len(space.ids) // graph.leaves[space.owner].module.down_proj.shape[2]
        keep = keep_id[space.ids].reshape(experts, -1)
        most = int(keep.sum(1).max())
        if int(keep.sum(1).min()) != most:
            warnings.append(f"{space.owner}: experts keep {sorted(set(keep.sum(1).tolist()))} intermediate channels; "
                            f"every expert keeps {most} (its 3-D weights need one size).")
            for row in keep:
                row[np.flatnonzero(~row)[: most - int(row.sum())]] = True
            keep_id[space.ids] = keep.reshape(-1)


def _round_up_heads(graph: ChannelGraph, keep_id: np.ndarray) -> None:
    for att in graph.attention.values():
        if att.heads_space is not None:
            heads = keep_id[att.heads_space.ids].reshape(att.num_kv_heads, -1).any(1)
            keep_id[att.heads_space.ids] = np.repeat(heads, att.group_size * att.head_dim)


def _explain(graph: ChannelGraph, masks: dict[str, LayerMask], kept: KeptChannels, roots: np.ndarray,
             output_roots: set[int], warnings: list[str]) -> None:
    """Warn for every mask whose removals were not all carried out (the 'model is not smaller' question)."""
    heads = {p for a in graph.attention.values() for p in a.projections()}
    for name, mask in masks.items():
        wanted = int((~mask.rows_keep).sum())
        rows = len(mask.rows_keep)
        done = rows - len(kept[name]["out"]) if name in kept else 0
        if not wanted or done >= wanted:
            continue
        ids = _out_ids(graph, name)
        tied = [o for o in graph.owners_of(ids, roots) if o != name] if ids is not None else []
        if name in heads:
            why = "attention heads go only as whole kv-head groups zeroed in q, k and v"
        elif ids is not None and output_roots.intersection(roots[ids[(ids >= 0) & ~mask.rows_keep]].tolist()):
            why = "they reach the model output, whose shape is kept"
        elif tied:
            why = f"its channels are coupled with {tied} and a channel goes only when all of them drop it"
        else:
            why = "a layer keeps at least one channel"
        warnings.append(f"{name}: mask removes {wanted} of {rows} output channels; {done} removed ({why}).")
