"""One channel decision per group of coupled layers (dependency-aware pruning), in the dimensions asked for."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from slimkit.engines._union_find import UnionFind
from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.dims import Dims, ratio_for
from slimkit.engines.pruning.maskers import (
    StructuredWeightMasker,
    channel_masks,
    lowest_indices,
    rounded_num_to_prune,
)
from slimkit.engines.speedup.layers import out_major

ChannelCoupling = Any  # a slimkit.engines.pruning.coupling.ChannelCoupling (which imports this module)


@dataclass
class ChannelGroupPlan:
    """One group of coupled layers: its members, coupled channels, how many can go and how many went."""

    layers: list[str]
    channels: int
    prunable: int
    pruned: int
    sparsity: float
    dim: str = "mlp"


@torch.no_grad()
def reconcile(coupling: ChannelCoupling, pruner: Pruner, *, lock: bool, balance: bool, min_layers: int = 1,
              dims: Dims | None = None, round_to: int = 1) -> list[ChannelGroupPlan]:
    """Give every group of coupled wrapped layers one channel decision and install its masks.

    Groups are the wrapped Conv/Linear/depthwise layers connected by shared channel classes. ``lock=True``
    plans from scratch: channels that are pinned or also produced by a layer outside the group are never
    masked, and channels already masked go first; an embedding or MoE experts module producing channels of a
    group in ``dims`` is not "outside": it is masked with the group (``pruner.extra_masks``). ``lock=False``
    revises per-layer masks: a group touching foreign channels keeps its masks (the speedup reports what it
    cannot remove), and the other groups are re-scored from their weights. ``balance=True`` divides each
    layer's importances by their mean so every layer weighs the same. Groups of fewer than ``min_layers``
    layers, and groups whose dimension is not in ``dims`` (None: any), are left alone. A group is cut at its
    dimension's ratio in ``dims``, else at the smallest sparsity among its layers; the group's kept channel
    count is rounded to the nearest multiple of ``round_to`` (:func:`~.maskers.rounded_num_to_prune`; channels
    that may not go can leave it off the multiple).
    """
    masker = pruner.masker
    if not isinstance(masker, StructuredWeightMasker):
        return []
    wrappers = {w.name: (i, w) for i, w in enumerate(pruner.get_modules_wrapper())}
    located = {n: c for n in wrappers if (c := coupling.layer_classes(n)) is not None}
    extra = getattr(pruner, "extra_masks", None)
    passive = {n: coupling.producers[n] for n in coupling.passive} if lock and extra is not None and (
        dims is None or "hidden" in dims) else {}
    foreign = {int(r) for name, classes in coupling.producers.items() if name not in located and name not in passive
               for r in classes}
    locked = foreign | coupling.pinned_classes if lock else set()
    plans = []
    for members in _components({**located, **passive}):
        layers = [n for n in members if n in located]
        classes = np.unique(np.concatenate([located[n][located[n] >= 0] for n in layers] or [np.zeros(0, int)]))
        dim = _dim(coupling, layers)
        if not layers or len(layers) < min_layers or (not lock and foreign.intersection(classes.tolist())) or (
                dims is not None and dim not in dims):
            continue
        if not lock:  # score the weights themselves, not the per-layer decision already in the masks
            for name in layers:
                wrappers[name][1].weight_mask.fill_(1)
        score = torch.zeros(len(classes), dtype=torch.float64)
        for name in layers:
            idx, wrapper = wrappers[name]
            importance = masker.get_channel_importance(wrapper, idx).detach().double().flatten().cpu()
            mask = out_major(wrapper.module, wrapper.weight_mask.detach())
            already = mask.reshape(mask.shape[0], -1).sum(1) == 0
            importance = importance.masked_fill(already.cpu(), -math.inf)
            if balance:
                finite = importance[importance.isfinite()]
                importance = importance / (finite.abs().mean().clamp_min(1e-12) if finite.numel() else 1.0)
            rows = located[name]
            where = torch.from_numpy(np.searchsorted(classes, rows[rows >= 0]))
            score.index_add_(0, where, importance[torch.from_numpy(np.flatnonzero(rows >= 0))])
        candidates = [i for i, c in enumerate(classes.tolist()) if c not in locked]
        sparsity = ratio_for(dims or {}, dim, min(float(wrappers[n][1].config["sparsity"]) for n in layers))
        k = min(rounded_num_to_prune(sparsity, len(classes), round_to), len(candidates))
        order = lowest_indices(score[candidates], k)
        dropped = {int(classes[candidates[i]]) for i in order.tolist()}
        plans.append(ChannelGroupPlan(members, len(classes), len(candidates), len(dropped), sparsity, dim))
        pruner.apply_masks({
            name: channel_masks(wrappers[name][1], torch.tensor([float(r not in dropped) for r in
                                                                 located[name].tolist()]))
            for name in layers
        })
        for name in members:
            if name in passive:
                extra[name] = passive_mask(coupling, name, [r not in dropped for r in passive[name].tolist()])
    return plans


def passive_mask(coupling: ChannelCoupling, name: str, keep: list[bool]) -> dict[str, Any]:
    """The speedup mask of an embedding (its columns) or a MoE experts module (its hidden rows)."""
    module = coupling.graph.leaves[name].module
    kept = torch.tensor([i for i, k in enumerate(keep) if k], dtype=torch.long)
    if coupling.graph.leaves[name].kind == "embedding":
        mask = torch.zeros_like(module.weight)
        mask[:, kept] = 1
        return {"weight_mask": mask, "bias_mask": None}
    return {"out_channels": kept}


def _dim(coupling: ChannelCoupling, layers: list[str]) -> str:
    found = {coupling.layer_dim(n) for n in layers}
    return "hidden" if "hidden" in found else "mlp"


def _components(classes: Mapping[str, np.ndarray]) -> list[list[str]]:
    """Group layer names that share at least one channel class (in the mapping's order)."""
    names = list(classes)
    layers = UnionFind()
    owner: dict[int, int] = {}
    for i, name in enumerate(names):
        layers.find(i)
        for c in np.unique(classes[name]).tolist():
            if c >= 0:
                layers.union_all([owner.setdefault(c, i), i])
    comps: dict[int, list[str]] = {}
    for i, name in enumerate(names):
        comps.setdefault(layers.find(i), []).append(name)
    return list(comps.values())
