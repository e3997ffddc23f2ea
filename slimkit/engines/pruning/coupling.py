"""Channel coupling: which layers' output channels are tied, and filter masks that agree inside a group.

One trace of the model (:func:`slimkit.engines.speedup.trace_channels`) tells which output channels are
tied together (residual adds, gated products, depthwise convs, norms). Tied channels form a *class*; the
speedup removes a class only when every layer producing it drops it, so masks chosen layer by layer mostly
cancel out. :class:`ChannelCoupling` is the one place that turns the trace into decisions:

* :meth:`ChannelCoupling.reconcile` gives every group of coupled layers one shared channel decision
  (dependency-aware pruning, as NNI's ``dependency_aware=True``): each class is scored by the sum of its
  layers' filter importances and the group prunes ``num_to_prune(s, classes)`` of them at the smallest
  sparsity among its layers. :class:`~slimkit.engines.pruning.group.GroupFilterPruner` and the smash
  filter pruners both use it.
* :meth:`ChannelCoupling.shrinkable` keeps the layers whose channels the speedup can really remove, in the
  dimensions asked for (:mod:`~slimkit.engines.pruning.dims`: ``mlp``, ``heads``, ``hidden``);
  :func:`~slimkit.engines.pruning.blockers.explain` says why the others cannot be.
* :meth:`ChannelCoupling.producer_masks` turns BatchNorm masks (Network Slimming) into masks on the layers
  that produce those channels, which is what the speedup shrinks; :func:`norm_producer_masks` does the same
  for a whole mask dict given a model and an input (the experiment layer's ``apply_speedup`` uses it).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from slimkit.engines._union_find import UnionFind
from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.dims import DIMS, Dims
from slimkit.engines.pruning.reconcile import ChannelGroupPlan, reconcile
from slimkit.engines.speedup.tracer import trace_channels

_PRUNABLE_KINDS = ("conv", "linear")
_PASSIVE_KINDS = ("embedding", "experts")


def _tracked(ids: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """Class root per channel, -1 where the channel is untracked."""
    return np.where(ids >= 0, roots[np.maximum(ids, 0)], -1)


class ChannelCoupling:
    """The channel classes and groups of ``model`` on ``dummy_input`` (one forward pass, nothing is changed)."""

    def __init__(self, model: nn.Module, dummy_input: Any) -> None:
        self.graph = graph = trace_channels(model, dummy_input)
        self._modules = dict(model.named_modules())  # before a pruner wraps any layer
        self._roots = roots = graph.uf.roots()
        #: producer name -> class root of each output channel; prunable producers are Conv/Linear leaves
        self.producers: dict[str, np.ndarray] = {}
        self.prunable: set[str] = set()
        #: producers a pruner does not wrap but masks with the hidden channels (embeddings, MoE experts)
        self.passive: set[str] = set()
        outputs = {att.o for att in graph.attention.values() if att.o}  # an attention block's output projection
        for space in graph.spaces.values():
            if space.kind in ("param", "inner"):
                continue
            name = space.owner if space.kind == "out" else f"{space.owner}#{space.kind}"
            self.producers[name] = roots[space.ids]
            leaf = graph.leaves.get(space.owner)
            if space.kind == "out" and (leaf is not None and leaf.kind in _PRUNABLE_KINDS or space.owner in outputs):
                self.prunable.add(name)
            elif space.kind == "out" and leaf is not None and leaf.kind in _PASSIVE_KINDS:
                self.passive.add(name)
        #: q/k/v projection -> its attention block (whole heads are pruned through them)
        self.attention = {p: att for att in graph.attention.values() for p in att.projections()}
        self.experts = [name for name, rec in graph.leaves.items() if rec.kind == "experts"]
        #: depthwise convs (their channels are their input's) and norms: class root per channel, -1 untracked
        self.depthwise: dict[str, np.ndarray] = {}
        self.norms: dict[str, np.ndarray] = {}
        for name, rec in graph.leaves.items():
            if rec.kind in ("depthwise", "grouped_conv") and rec.out_ids is not None:
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
        #: groups that are a residual stream: joined by a residual add, or fed by an embedding / experts module
        self.hidden = {self._find(int(r)) for ids in graph.residual for r in np.unique(roots[ids[ids >= 0]])}
        self.hidden |= {g for name in self.passive for g in self.groups.get(name, ())}

    # --- groups ---------------------------------------------------------------------------------------------
    def members(self, group: int) -> tuple[list[str], list[str], list[str]]:
        """(producers, depthwise convs, norms) whose channels belong to ``group``."""
        return self._members.get(group, ([], [], []))

    def group_of(self, root: int) -> int:
        """The group of the channel class ``root``."""
        return self._find(root)

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
                for proj in att.projections():
                    found.append((proj, self._modules[proj], channels, positions))
            else:
                found.append((name, rec.module, channels, positions))
        return found

    def group_dim(self, group: int) -> str:
        """``"hidden"`` for a residual stream, ``"heads"`` for an attention block's context, else ``"mlp"``."""
        if group in self.hidden:
            return "hidden"
        return "heads" if any(p.endswith("#heads") for p in self.members(group)[0]) else "mlp"

    def layer_dim(self, name: str) -> str | None:
        """The dimension pruning ``name``'s output channels cuts (None: not a layer the coupling can prune)."""
        if name in self.attention:
            return "heads"
        groups = self.groups.get(name)
        if not groups or (name not in self.prunable and name not in self.depthwise):
            return None
        return "hidden" if any(self.group_dim(g) == "hidden" for g in groups) else "mlp"

    def _group_ok(self, group: int, selected: set[str], norms_decide: bool, dims: Iterable[str] = DIMS) -> bool:
        producers, _, norms = self.members(group)
        passive_ok = "hidden" in dims and not norms_decide
        if group in self.pinned or not all(p in self.prunable or (passive_ok and p in self.passive)
                                           for p in producers):
            return False
        if norms_decide:
            return bool(norms) and all(n in selected for n in norms)
        return self.group_dim(group) in dims and all(p in selected for p in producers if p in self.prunable)

    def heads_ok(self, name: str, selected: set[str]) -> bool:
        """Whether ``name``'s attention block can lose whole heads: all its q/k/v projections are selected."""
        att = self.attention.get(name)
        return att is not None and all(p in selected for p in att.projections())

    def shrinkable(self, selected: Iterable[str], norms_decide: bool = False, dims: Iterable[str] = DIMS) -> set[str]:
        """The layers of ``selected`` whose channels the speedup can really remove, in the dimensions ``dims``.

        Filter pruners (``norms_decide=False``) select Conv/Linear layers: a layer qualifies when every producer
        of its group is a selected Conv/Linear (or, for ``"hidden"``, an embedding or MoE experts module), nothing
        pins the group and its dimension is in ``dims``; attention q/k/v projections qualify for ``"heads"``
        when all three are selected. Slim (``norms_decide=True``) selects norms: every norm reading the group
        must be selected, and its producers must be Conv/Linear.
        """
        chosen, dims = set(selected), set(dims)
        if norms_decide:
            return {n for n in chosen if n in self.norms and self.groups.get(n)
                    and all(self._group_ok(g, chosen, True) for g in self.groups[n])}
        out = {n for n in chosen if "heads" in dims and self.heads_ok(n, chosen)}
        table = self.prunable | set(self.depthwise)
        return out | {n for n in chosen if n in table and self.groups.get(n)
                      and all(self._group_ok(g, chosen, False, dims) for g in self.groups[n])}

    # --- masks --------------------------------------------------------------------------------------------------
    def reconcile(self, pruner: Pruner, *, lock: bool, balance: bool, min_layers: int = 1,
                  dims: Dims | None = None, round_to: int = 1) -> list[ChannelGroupPlan]:
        """Give every group of coupled wrapped layers one channel decision and install its masks.

        See :func:`slimkit.engines.pruning.reconcile.reconcile` (``dims``: which groups to cut, and at which
        ratio; embeddings and MoE experts feeding a ``"hidden"`` group are masked with it, in
        ``pruner.extra_masks``; ``round_to``: each group keeps a multiple of it).
        """
        return reconcile(self, pruner, lock=lock, balance=balance, min_layers=min_layers, dims=dims,
                         round_to=round_to)

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
