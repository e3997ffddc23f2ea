"""Dependency-aware filter pruning (NNI's ``dependency_aware=True, dummy_input=...``).

Filter pruners rank each layer on its own. When layers are coupled (a residual add joins their outputs, a
depthwise conv follows an expansion, a concatenation feeds one depthwise conv, a gate multiplies two
projections), the speedup can only remove a channel that *every* coupled producer dropped, so independently
chosen masks mostly cancel out and the model barely shrinks. With ``dependency_aware=True`` the pruner traces
the model once on ``dummy_input``, groups the selected layers by shared channels, scores each coupled channel
by the sum of its members' importances (the pruner's own criterion: L1, L2, FPGM, APoZ, mean activation,
Taylor) and masks the lowest-scoring channels in every member at once, at the smallest sparsity among them.
Attention blocks the tracer recognises prune whole key/value-head groups: when a block's q, k and v
projections are all selected, each group is scored by the summed importance of its q/k/v rows.
The masks are then exactly what :class:`~slimkit.compression.speedup.ModelSpeedup` removes. The decisions are
made by :meth:`ChannelCoupling.reconcile <slimkit.compression.pruning.coupling.ChannelCoupling.reconcile>`.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from slimkit.compression.pruning.compressor import Pruner
from slimkit.compression.pruning.config import PruningConfigError
from slimkit.compression.pruning.coupling import ChannelCoupling, ChannelGroupPlan
from slimkit.compression.pruning.maskers import StructuredWeightMasker, channel_masks, lowest_indices, num_to_prune

__all__ = ["DependencyAwarePruner"]


class DependencyAwarePruner(Pruner):
    """A filter pruner that can give coupled layers one shared channel decision (``dependency_aware=True``).

    Subclasses call :meth:`_init_dependency` *before* ``Pruner.__init__`` (the model is traced before its
    layers are wrapped). With the flag on, after :meth:`compress` ``groups`` lists every group of coupled
    layers with its counts, and ``skipped`` the selected layers that did not run on ``dummy_input`` as
    Conv/Linear producers (left unpruned with a warning). A channel that an unselected layer also produces,
    or that reaches the model output or an op the speedup cannot shrink, is never masked.
    """

    dependency_aware: bool = False
    coupling: ChannelCoupling | None = None

    def _init_dependency(self, model: nn.Module, dependency_aware: bool, dummy_input: Any) -> None:
        """Validate the flag and, when it is on, trace ``model`` on ``dummy_input`` for the channel coupling."""
        name = type(self).__name__
        if not isinstance(dependency_aware, bool):
            raise PruningConfigError(
                f"{name} dependency_aware must be True or False, got {type(dependency_aware).__name__} "
                f"{dependency_aware!r}; pass the example input by keyword: dummy_input=..."
            )
        if dependency_aware and dummy_input is None:
            raise PruningConfigError(
                f"{name} needs dummy_input (an input the model accepts) when dependency_aware=True, to find which "
                "layers' channels are coupled; pass dummy_input=torch.randn(1, C, H, W) or the model's example "
                "inputs, or set dependency_aware=False to rank every layer on its own."
            )
        self.dependency_aware = dependency_aware
        self.groups: list[ChannelGroupPlan] = []
        self.skipped: list[str] = []
        self.coupling = ChannelCoupling(model, dummy_input) if dependency_aware and isinstance(model, nn.Module) \
            else None
        self.graph = None if self.coupling is None else self.coupling.graph

    @torch.no_grad()
    def update_mask(self) -> None:
        """Per-layer masks, or with ``dependency_aware=True`` every group's masks at once (one-shot)."""
        if self.coupling is None:
            super().update_mask()
            return
        if not self.modules_wrapper or all(w.if_calculated for w in self.modules_wrapper):
            return
        heads = self._prune_heads()
        handled = {name for plan in heads for name in plan.layers}
        self.skipped = [w.name for w in self.modules_wrapper
                        if w.name not in handled and self.coupling.layer_classes(w.name) is None]
        if self.skipped:
            warnings.warn(
                f"{type(self).__name__}: {self.skipped} did not run on dummy_input as Conv/Linear producers (or "
                "are attention projections whose q/k/v are not all selected), so they were left unpruned.",
                UserWarning, stacklevel=2)
        self.groups = self.coupling.reconcile(self, lock=True, balance=False) + heads
        for wrapper in self.modules_wrapper:
            wrapper.if_calculated = True

    def _prune_heads(self) -> list[ChannelGroupPlan]:
        """Mask whole key/value-head groups of every traced attention block whose q, k and v are all wrapped.

        The output projection keeps its rows (they are the residual stream, decided with its other producers);
        the speedup removes the pruned heads' columns from it.
        """
        if not isinstance(self.masker, StructuredWeightMasker):
            return []
        wrappers = {w.name: (i, w) for i, w in enumerate(self.modules_wrapper)}
        plans = []
        for att in self.coupling.graph.attention.values():
            names = [att.q, att.k, att.v]
            if not all(n in wrappers for n in names):
                continue
            rows = (att.group_size * att.head_dim, att.head_dim, att.head_dim)  # rows per kv group in q, k, v
            score = torch.zeros(att.num_kv_heads, dtype=torch.float64)
            for name, per_group in zip(names, rows, strict=True):
                idx, wrapper = wrappers[name]
                importance = self.masker.get_channel_importance(wrapper, idx).detach().double().flatten().cpu()
                score += importance.reshape(att.num_kv_heads, per_group).sum(1)
            sparsity = min(float(wrappers[n][1].config["sparsity"]) for n in names)
            pruned = num_to_prune(sparsity, att.num_kv_heads)
            keep = torch.ones(att.num_kv_heads)
            keep[lowest_indices(score, pruned)] = 0
            self.apply_masks({name: channel_masks(wrappers[name][1], keep.repeat_interleave(per_group))
                              for name, per_group in zip(names, rows, strict=True)})
            members = names + ([att.o] if att.o in wrappers else [])  # o loses the heads' columns in the speedup
            plans.append(ChannelGroupPlan(members, att.num_kv_heads, att.num_kv_heads, pruned, sparsity))
        return plans
