"""Channel coupling: which layers' output channels are tied, and filter masks that agree inside a group.

One trace of the model (:func:`slimkit.compression.speedup.trace_channels`) tells which output channels are
tied together (residual adds, gated products, depthwise convs, norms). Tied channels form a *class*; the
speedup removes a class only when every layer producing it drops it, so masks chosen layer by layer mostly
cancel out. :class:`ChannelCoupling` is the one place that turns the trace into decisions:

* :meth:`ChannelCoupling.reconcile` gives every group of coupled layers one shared channel decision
  (dependency-aware pruning, as NNI's ``dependency_aware=True``): each class is scored by the sum of its
  layers' filter importances and the group prunes ``num_to_prune(s, classes)`` of them at the smallest
  sparsity among its layers. :class:`~slimkit.compression.pruning.group.GroupFilterPruner` and the smash
  filter pruners both use it.
* :meth:`ChannelCoupling.shrinkable` keeps the layers whose channels the speedup can really remove.
* :meth:`ChannelCoupling.producer_masks` turns BatchNorm masks (Network Slimming) into masks on the layers
  that produce those channels, which is what the speedup shrinks; :func:`norm_producer_masks` does the same
  for a whole mask dict given a model and an input (the experiment layer's ``apply_speedup`` uses it).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from slimkit.compression._union_find import UnionFind
from slimkit.compression.pruning.compressor import Pruner
from slimkit.compression.pruning.maskers import StructuredWeightMasker, channel_masks, lowest_indices, num_to_prune
from slimkit.compression.speedup.tracer import trace_channels

_PRUNABLE_KINDS = ("conv", "linear")


@dataclass
class ChannelGroupPlan:
    """One group of coupled layers: its members, coupled channels, how many can go and how many went."""

    layers: list[str]
    channels: int
    prunable: int
    pruned: int
    sparsity: float


def _tracked(ids: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """Class root per channel, -1 where the channel is untracked."""
    return np.where(ids >= 0, roots[np.maximum(ids, 0)], -1)


class ChannelCoupling:
    """The channel classes and groups of ``model`` on ``dummy_input`` (one forward pass, nothing is changed)."""

    def __init__(self, model: nn.Module, dummy_input: Any) -> None:
        self.graph = graph = trace_channels(model, dummy_input)
        self._roots = roots = graph.uf.roots()
        #: producer name -> class root of each output channel; prunable producers are Conv/Linear leaves
        self.producers: dict[str, np.ndarray] = {}
        self.prunable: set[str] = set()
        for space in graph.spaces.values():
            name = space.owner if space.kind == "out" else f"{space.owner}#{space.kind}"
            self.producers[name] = roots[space.ids]
            leaf = graph.leaves.get(space.owner)
            if space.kind == "out" and leaf is not None and leaf.kind in _PRUNABLE_KINDS:
                self.prunable.add(name)
        #: depthwise convs (their channels are their input's) and norms: class root per channel, -1 untracked
        self.depthwise: dict[str, np.ndarray] = {}
        self.norms: dict[str, np.ndarray] = {}
        for name, rec in graph.leaves.items():
            if rec.kind == "depthwise" and rec.out_ids is not None:
                self.depthwise[name] = _tracked(rec.out_ids, roots)
            elif rec.kind == "norm" and rec.in_ids is not None:
                self.norms[name] = _tracked(rec.in_ids, roots)
        components = UnionFind()
        for classes in self.producers.values():
            components.union_all(classes)
        self._find = components.find
        #: layer -> the groups its channels belong to (a norm after a concat may read several)
        self.groups: dict[str, set[int]] = {}
        self._members: dict[int, tuple[list[str], list[str], list[str]]] = {}
        for kind, table in enumerate((self.producers, self.depthwise, self.norms)):
            for name, classes in table.items():
                groups = {self._find(int(r)) for r in np.unique(classes[classes >= 0])}
                self.groups[name] = groups
                for group in groups:
                    self._members.setdefault(group, ([], [], []))[kind].append(name)
        #: class roots the speedup must keep (model outputs, ops it cannot shrink)
        self.pinned_classes = {int(r) for pin in graph.pins for r in np.unique(roots[pin.ids])}
        self.pinned = {self._find(r) for r in self.pinned_classes}

    # --- groups ---------------------------------------------------------------------------------------------
    def members(self, group: int) -> tuple[list[str], list[str], list[str]]:
        """(producers, depthwise convs, norms) whose channels belong to ``group``."""
        return self._members.get(group, ([], [], []))

    def layer_classes(self, name: str) -> np.ndarray | None:
        """Class root of each output channel of Conv/Linear/depthwise layer ``name`` (-1 untracked), else None."""
        if name in self.prunable:
            return self.producers[name]
        return self.depthwise.get(name)

    def consumers(self, name: str) -> list[tuple[str, nn.Module, np.ndarray, np.ndarray]]:
        """The Conv/Linear layers that read producer ``name``'s output channels, through any coupling op.

        One ``(layer name, module, channels, positions)`` per reader: output channel ``channels[i]`` of ``name``
        arrives at input channel ``positions[i]`` of the reader (after norms, activations, gates, depthwise convs;
        an attention block is read through its q/k/v projections).
        Empty when ``name`` is not a traced producer or nothing traced reads its channels.
        """
        classes = self.producers.get(name)
        if classes is None:
            return []
        owners: dict[int, list[int]] = {}
        for channel, cls in enumerate(classes.tolist()):
            owners.setdefault(cls, []).append(channel)
        found = []
        for name, rec in self.graph.leaves.items():
            if rec.kind not in (*_PRUNABLE_KINDS, "attention") or rec.in_ids is None:
                continue
            read = _tracked(rec.in_ids, self._roots)
            pairs = [(c, p) for p in np.flatnonzero(np.isin(read, classes)).tolist() for c in owners[int(read[p])]]
            if not pairs:
                continue
            channels, positions = (np.asarray(v, dtype=np.int64) for v in zip(*pairs, strict=True))
            if rec.kind == "attention":  # an attention block reads its input through its q/k/v projections
                att = self.graph.attention[name]
                for proj in (att.q, att.k, att.v):
                    found.append((proj, rec.module.get_submodule(proj[len(name) + 1:] if name else proj), channels,
                                  positions))
            else:
                found.append((name, rec.module, channels, positions))
        return found

    def _group_ok(self, group: int, selected: set[str], norms_decide: bool) -> bool:
        producers, _, norms = self.members(group)
        if group in self.pinned or not all(p in self.prunable for p in producers):
            return False
        if norms_decide:
            return bool(norms) and all(n in selected for n in norms)
        return all(p in selected for p in producers)

    def shrinkable(self, selected: Iterable[str], norms_decide: bool = False) -> set[str]:
        """The layers of ``selected`` whose channels the speedup can really remove.

        Filter pruners (``norms_decide=False``) select Conv/Linear layers: a layer qualifies when every producer
        of its group is a selected Conv/Linear and nothing pins the group. Slim (``norms_decide=True``) selects
        norms: every norm reading the group must be selected, and its producers must be Conv/Linear.
        """
        chosen = set(selected)
        table = self.norms if norms_decide else self.prunable | set(self.depthwise)
        return {n for n in chosen if n in table and self.groups.get(n)
                and all(self._group_ok(g, chosen, norms_decide) for g in self.groups[n])}

    # --- masks --------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def reconcile(self, pruner: Pruner, *, lock: bool, balance: bool, min_layers: int = 1) -> list[ChannelGroupPlan]:
        """Give every group of coupled wrapped layers one channel decision and install its masks.

        Groups are the wrapped Conv/Linear/depthwise layers connected by shared channel classes. ``lock=True``
        plans from scratch: channels that are pinned or also produced by a layer outside the group are never
        masked, and channels already masked go first. ``lock=False`` revises per-layer masks: a group touching
        such foreign channels keeps its masks (the speedup reports what it cannot remove), and the other
        groups are re-scored from their weights. ``balance=True`` divides each layer's importances by their
        mean so every layer weighs the same. Groups of fewer than ``min_layers`` layers are left alone.
        """
        masker = pruner.masker
        if not isinstance(masker, StructuredWeightMasker):
            return []
        wrappers = {w.name: (i, w) for i, w in enumerate(pruner.get_modules_wrapper())}
        located = {n: c for n in wrappers if (c := self.layer_classes(n)) is not None}
        foreign = {int(r) for name, classes in self.producers.items() if name not in located for r in classes}
        locked = foreign | self.pinned_classes if lock else set()
        plans = []
        for layers in _components(located):
            classes = np.unique(np.concatenate([located[n][located[n] >= 0] for n in layers]))
            if len(layers) < min_layers or (not lock and foreign.intersection(classes.tolist())):
                continue
            if not lock:  # score the weights themselves, not the per-layer decision already in the masks
                for name in layers:
                    wrappers[name][1].weight_mask.fill_(1)
            score = torch.zeros(len(classes), dtype=torch.float64)
            for name in layers:
                idx, wrapper = wrappers[name]
                importance = masker.get_channel_importance(wrapper, idx).detach().double().flatten().cpu()
                already = wrapper.weight_mask.detach().reshape(wrapper.weight_mask.shape[0], -1).sum(1) == 0
                importance = importance.masked_fill(already.cpu(), -math.inf)
                if balance:
                    finite = importance[importance.isfinite()]
                    importance = importance / (finite.abs().mean().clamp_min(1e-12) if finite.numel() else 1.0)
                rows = located[name]
                where = torch.from_numpy(np.searchsorted(classes, rows[rows >= 0]))
                score.index_add_(0, where, importance[torch.from_numpy(np.flatnonzero(rows >= 0))])
            candidates = [i for i, c in enumerate(classes.tolist()) if c not in locked]
            sparsity = min(float(wrappers[n][1].config["sparsity"]) for n in layers)
            k = min(num_to_prune(sparsity, len(classes)), len(candidates))
            order = lowest_indices(score[candidates], k)
            dropped = {int(classes[candidates[i]]) for i in order.tolist()}
            plans.append(ChannelGroupPlan(layers, len(classes), len(candidates), len(dropped), sparsity))
            pruner.apply_masks({
                name: channel_masks(wrappers[name][1], torch.tensor([float(r not in dropped) for r in
                                                                     located[name].tolist()]))
                for name in layers
            })
        return plans

    def producer_masks(self, norm_masks: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, torch.Tensor]]:
        """Speedup masks (``{"out_channels": kept}``) for the producers of channels that pruned norms removed.

        A channel goes when every norm reading it pruned it (the speedup's own union rule), and only in
        groups whose producers are all Conv/Linear, whose norms are all pruned and that nothing pins.
        """
        keeps = {n: m["weight_mask"].detach().cpu().reshape(-1) != 0 for n, m in norm_masks.items() if n in self.norms}
        read: set[int] = set()
        kept: set[int] = set()
        for name, keep in keeps.items():
            for r, k in zip(self.norms[name].tolist(), keep.tolist(), strict=True):
                read.add(r)
                if k:
                    kept.add(r)
        removed = read - kept
        out: dict[str, dict[str, torch.Tensor]] = {}
        for group in {g for n in keeps for g in self.groups.get(n, ())}:
            if not self._group_ok(group, set(keeps), norms_decide=True):
                continue
            for name in self.members(group)[0]:
                rows = self.producers[name].tolist()
                channels = [i for i, r in enumerate(rows) if r not in removed]
                if len(channels) < len(rows):
                    out[name] = {"out_channels": torch.tensor(channels, dtype=torch.long)}
        return out


def has_norm_masks(model: nn.Module, masks: Mapping[str, Any]) -> bool:
    """True when any mask sits on a BatchNorm layer (Network Slimming masks)."""
    modules = dict(model.named_modules())
    return any(isinstance(modules.get(name), _BatchNorm) for name in masks)


def norm_producer_masks(model: nn.Module, dummy_input: Any, masks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Masks for ``ModelSpeedup``: BatchNorm entries replaced by ``{"out_channels": ...}`` on their producers.

    The decision is :meth:`ChannelCoupling.producer_masks` on one trace of ``model`` on ``dummy_input``. Other
    entries are kept as they are (a producer with its own mask keeps it); BatchNorm masks on layers that did not
    run on ``dummy_input`` are ignored with a warning.
    """
    modules = dict(model.named_modules())
    norm = {n: m for n, m in masks.items() if isinstance(modules.get(n), _BatchNorm)}
    out: dict[str, Any] = {n: m for n, m in masks.items() if n not in norm}
    if not norm:
        return out
    coupling = ChannelCoupling(model, dummy_input)
    unreached = [n for n in norm if n not in coupling.norms]
    if unreached:
        warnings.warn(f"{unreached}: never ran on dummy_input, so their masks were ignored by the speedup.",
                      UserWarning, stacklevel=2)
    for name, entry in coupling.producer_masks(norm).items():
        out.setdefault(name, entry)
    return out


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
