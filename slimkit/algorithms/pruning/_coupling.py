"""Channel coupling for the smash pruners: which layers the speedup can shrink, and group-consistent masks.

One trace of the model (:func:`slimkit.compression.speedup.trace_channels`) tells which output channels are
tied together (residual adds, gated products, depthwise convs, norms). Layers whose channels are tied form a
*group*; the speedup removes a channel of a group only when every layer of the group drops it. From that:

* :meth:`Coupling.shrinkable` keeps the layers whose whole group is pruned and no channel of which is pinned
  (the model output, an op the speedup cannot shrink) or shared with a layer that cannot be pruned
  (embeddings, attention projections, excluded layers). ``"default"`` op types resolve to these layers.
* :meth:`Coupling.reconcile` makes filter masks agree inside a group (dependency-aware pruning, as NNI's
  ``dependency_aware=True``): channel scores are summed over the group's layers (each layer's importance
  divided by its mean, so every layer weighs the same) and the group prunes ``floor(s * channels)`` of them.
* :meth:`Coupling.producer_masks` turns BatchNorm masks (Network Slimming) into masks on the layers that
  produce those channels, which is what the speedup shrinks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from slimkit.compression.pruning import Pruner, num_to_prune
from slimkit.compression.pruning.maskers import StructuredWeightMasker, channel_masks, lowest_indices
from slimkit.compression.speedup import trace_channels

_PRUNABLE_KINDS = ("conv", "linear")


class _Components:
    """Union-find over channel-class roots (small and local: groups of layers sharing classes)."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union_all(self, items: Iterable[int]) -> None:
        items = [int(i) for i in items]
        for other in items[1:]:
            a, b = self.find(items[0]), self.find(other)
            if a != b:
                self.parent[max(a, b)] = min(a, b)


class Coupling:
    """The channel groups of ``model`` on ``dummy_input`` (one forward pass, nothing is changed)."""

    def __init__(self, model: nn.Module, dummy_input: Any) -> None:
        graph = trace_channels(model, dummy_input)
        roots = graph.uf.roots()
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
                self.depthwise[name] = np.where(rec.out_ids >= 0, roots[np.maximum(rec.out_ids, 0)], -1)
            elif rec.kind == "norm" and rec.in_ids is not None:
                self.norms[name] = np.where(rec.in_ids >= 0, roots[np.maximum(rec.in_ids, 0)], -1)
        components = _Components()
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
        self.pinned = {self._find(int(r)) for pin in graph.pins for r in np.unique(roots[pin.ids])}

    # --- groups ---------------------------------------------------------------------------------------------
    def members(self, group: int) -> tuple[list[str], list[str], list[str]]:
        """(producers, depthwise convs, norms) whose channels belong to ``group``."""
        return self._members.get(group, ([], [], []))

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
    def _rows(self, name: str) -> np.ndarray:
        return self.producers[name] if name in self.producers else self.depthwise[name]

    @torch.no_grad()
    def reconcile(self, pruner: Pruner) -> int:
        """Give the wrapped layers of every fully wrapped group one shared channel decision; returns #groups."""
        masker = pruner.masker
        if not isinstance(masker, StructuredWeightMasker):
            return 0
        wrappers = {w.name: (i, w) for i, w in enumerate(pruner.get_modules_wrapper())}
        done = 0
        for group in {g for n in wrappers for g in self.groups.get(n, ())}:
            producers, depthwise, _ = self.members(group)
            layers = [n for n in producers + depthwise if n in wrappers]
            if len(layers) < 2 or not all(p in wrappers for p in producers) or any(
                len(self.groups[n]) != 1 for n in layers
            ):
                continue
            classes = np.unique(np.concatenate([self._rows(n)[self._rows(n) >= 0] for n in layers]))
            position = {int(r): i for i, r in enumerate(classes)}
            score = torch.zeros(len(classes), dtype=torch.float64)
            for name in layers:  # score the weights themselves, not the per-layer decision already in the masks
                wrappers[name][1].weight_mask.fill_(1)
            for name in layers:
                idx, wrapper = wrappers[name]
                importance = masker.get_channel_importance(wrapper, idx).detach().double().flatten().cpu()
                importance = importance / importance.abs().mean().clamp_min(1e-12)
                rows = self._rows(name)
                tracked = torch.from_numpy(np.flatnonzero(rows >= 0))
                where = torch.tensor([position[int(r)] for r in rows[rows >= 0]], dtype=torch.long)
                score.index_add_(0, where, importance[tracked])
            sparsity = min(float(wrappers[n][1].config["sparsity"]) for n in layers)
            keep_class = torch.ones(len(classes))
            keep_class[lowest_indices(score, num_to_prune(sparsity, len(classes)))] = 0
            masks = {}
            for name in layers:
                rows = self._rows(name)
                keep = torch.tensor([1.0 if r < 0 else float(keep_class[position[int(r)]]) for r in rows])
                masks[name] = channel_masks(wrappers[name][1], keep)
            pruner.apply_masks(masks)
            done += 1
        return done

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
