"""The kept-channel record: which rows and columns of each layer survive, as JSON-ready lists.

Layers: ``{"out": [...], "in": [...]}`` (an embedding: ``"out"`` are its columns; a MoE experts module adds
``"inner"``, the kept intermediate channels of each expert). Attention blocks: ``{"heads": [...], "kv_heads":
[...]}``. Per-channel parameters (by qualified name): ``{"param_dim": d, "keep": [...]}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .graph import ChannelGraph

KeptChannels = dict[str, dict[str, Any]]
PRUNABLE = {"conv", "depthwise", "grouped_conv", "linear"}


def _kept(ids: np.ndarray, keep_id: np.ndarray) -> list[int]:
    return [i for i, x in enumerate(ids.tolist()) if x < 0 or keep_id[x]]


def kept_channels(graph: ChannelGraph, keep_id: np.ndarray, groups: dict[str, np.ndarray]) -> KeptChannels:
    """The record of every layer (and parameter) that loses channels under ``keep_id``."""
    kept: KeptChannels = {}

    def add(name: str, out: list[int], n_out: int, inn: list[int], n_in: int) -> None:
        if len(out) < n_out or len(inn) < n_in:
            kept[name] = {"out": out, "in": inn}

    for rec in graph.leaves.values():
        m = rec.module
        if rec.kind in PRUNABLE:
            add(rec.name, _kept(rec.out_ids, keep_id), len(rec.out_ids), _kept(rec.in_ids, keep_id), len(rec.in_ids))
        elif rec.kind == "embedding":
            rows = list(range(m.num_embeddings))
            add(rec.name, _kept(rec.out_ids, keep_id), len(rec.out_ids), rows, len(rows))
        elif rec.kind == "norm":
            ch = _kept(rec.in_ids, keep_id)
            add(rec.name, ch, len(rec.in_ids), ch, len(rec.in_ids))
        elif rec.kind == "experts":
            _experts(graph, rec.name, keep_id, kept)
        elif rec.kind == "attention":
            _attention(graph, rec.name, rec.in_ids, rec.out_ids, keep_id, groups, add, kept)
    for param in graph.params.values():
        keep = _kept(param.ids, keep_id)
        if len(keep) < len(param.ids):
            kept[param.name] = {"param_dim": param.dim, "keep": keep}
    return kept


def _experts(graph: ChannelGraph, name: str, keep_id: np.ndarray, kept: KeptChannels) -> None:
    rec = graph.leaves[name]
    inner_ids = graph.spaces[f"{name}#inner"].ids
    experts = rec.module.down_proj.shape[0]
    inner = [np.flatnonzero(keep_id[row]).tolist() for row in inner_ids.reshape(experts, -1)]
    out, inn = _kept(rec.out_ids, keep_id), _kept(rec.in_ids, keep_id)
    if len(out) < len(rec.out_ids) or len(inn) < len(rec.in_ids) or len(inner[0]) < len(inner_ids) // experts:
        kept[name] = {"out": out, "in": inn, "inner": inner}


def _attention(graph: ChannelGraph, name: str, in_ids: np.ndarray, out_ids: np.ndarray, keep_id: np.ndarray,
               groups: dict[str, np.ndarray], add: Any, kept: KeptChannels) -> None:
    att = graph.attention[name]
    g_keep = groups[att.name]
    if att.heads_space is not None:
        g_keep = keep_id[att.heads_space.ids].reshape(att.num_kv_heads, -1).any(1)
    d, inn, n_in = att.head_dim, _kept(in_ids, keep_id), len(in_ids)
    kv = [j for j in range(att.num_kv_heads) if g_keep[j]]
    heads = [h for h in range(att.num_heads) if g_keep[h // att.group_size]]
    rows = att.rows(g_keep)
    sizes = {layer: len(group) for layer, group in att.row_groups().items()}
    for layer, kept_rows in rows.items():
        add(layer, kept_rows, sizes[layer], inn, n_in)
    if att.o is not None:
        q_rows = att.rows(g_keep)[att.q][: len(heads) * d]
        add(att.o, _kept(out_ids, keep_id), len(out_ids), q_rows, att.num_heads * d)
    if len(heads) < att.num_heads:
        kept[att.name] = {"heads": heads, "kv_heads": kv}
