"""Weights shared between layers (a language model's embedding and output head): sliced alike, tied again after.

A tied weight can lose channels only along dims that every layer using it slices the same way: an embedding
``[vocab, hidden]`` and a Linear head ``[vocab, hidden]`` both read the hidden channels along dim 1, so those
are merged into one class; the vocab rows are the head's output and the embedding's lookup table, which stay.
After a shrink every layer that shared a weight gets the same (smaller) Parameter again.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from .graph import ChannelGraph, LeafRecord
from .layers import is_conv1d

SHARED_ATTRS = ("weight", "bias")


def _dim_ids(rec: LeafRecord, attr: str) -> list[np.ndarray | None] | None:
    """The ids along each dim of ``rec``'s parameter ``attr`` (None for a dim that carries no channels)."""
    if rec.kind == "embedding" and attr == "weight":
        return [None, rec.out_ids]
    if rec.kind == "linear":
        if attr == "bias":
            return [rec.out_ids]
        return [rec.in_ids, rec.out_ids] if is_conv1d(rec.module) else [rec.out_ids, rec.in_ids]
    return None


def _pin_users(graph: ChannelGraph, group: list[tuple[LeafRecord, str]], per_user: list[tuple[np.ndarray, ...]],
               why: str = "") -> None:
    """Keep the ids ``per_user`` lists for each user of one shared weight, naming the other users."""
    names = [rec.name for rec, _ in group]
    for (rec, _), arrays in zip(group, per_user, strict=True):
        others = [n for n in names if n != rec.name]
        for ids in arrays:
            graph.pin(ids, "shared weight", rec.name, f"it shares a weight with {others}{why}")


def tie_shared_weights(graph: ChannelGraph) -> None:
    """Merge the channels a shared weight ties together; keep those its users slice differently."""
    users: dict[int, list[tuple[LeafRecord, str]]] = {}
    for rec in graph.leaves.values():
        for attr, p in rec.module.named_parameters(recurse=False):
            users.setdefault(id(p), []).append((rec, attr))
    for group in users.values():
        if len(group) < 2:
            continue
        layouts = [_dim_ids(rec, attr) for rec, attr in group]
        if any(layout is None for layout in layouts):
            _pin_users(graph, group, [(rec.in_ids, rec.out_ids) for rec, _ in group])
            continue
        for dim in range(len(layouts[0])):
            per_user = [layout[dim] for layout in layouts]
            if all(ids is not None for ids in per_user):
                for ids in per_user[1:]:
                    graph.uf.union_arrays(per_user[0], ids)
                loose = np.any([ids < 0 for ids in per_user], axis=0)  # a user reads channels no layer produces
                _pin_users(graph, group, [(ids[loose],) for ids in per_user],
                           f", which reads dim {dim} of it from channels no layer produces")
            else:
                _pin_users(graph, group, [(ids,) for ids in per_user], f", which does not slice dim {dim} of it")


def shared_parameters(modules: Iterable[tuple[str, nn.Module]]) -> list[list[tuple[nn.Module, str]]]:
    """Groups of (module, attribute) that hold the same Parameter object."""
    users: dict[int, list[tuple[nn.Module, str]]] = {}
    for _, module in modules:
        for attr in SHARED_ATTRS:
            p = module._parameters.get(attr)
            if p is not None:
                users.setdefault(id(p), []).append((module, attr))
    return [g for g in users.values() if len(g) > 1]


def retie(groups: list[list[tuple[nn.Module, str]]]) -> None:
    """Make every group share one Parameter again after its users were shrunk alike."""
    for group in groups:
        first_module, first_attr = group[0]
        shared = first_module._parameters[first_attr]
        for module, attr in group[1:]:
            p = module._parameters[attr]
            if p is not shared and p.shape == shared.shape and torch.equal(p, shared):
                module._parameters[attr] = shared
