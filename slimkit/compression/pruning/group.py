"""Group-aware filter pruning: layers whose output channels are coupled drop the *same* channels.

Per-layer filter pruners rank each layer on its own. When layers are coupled (a residual add joins their
outputs, a depthwise conv follows an expansion), the speedup can only remove a channel that *every*
coupled producer dropped, so independently chosen masks mostly cancel out and the residual stream does
not shrink. The pruners here trace the model once (``dummy_input`` is required), group the selected layers
by shared channels, score each coupled channel by the sum of its members' filter importances, and mask
the lowest-scoring channels in every member at once. Masks are then exactly what ``ModelSpeedup`` removes.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from slimkit.compression.pruning.compressor import Pruner
from slimkit.compression.pruning.config import PruningConfigError
from slimkit.compression.pruning.maskers import (
    FPGMPrunerMasker,
    L1FilterPrunerMasker,
    L2FilterPrunerMasker,
    channel_masks,
    lowest_indices,
    num_to_prune,
)
from slimkit.compression.pruning.one_shot import FILTER_OP_TYPES
from slimkit.compression.speedup.graph import ChannelGraph
from slimkit.compression.speedup.tracer import trace_channels

GROUP_IMPORTANCE: dict[str, type] = {"l1": L1FilterPrunerMasker, "l2": L2FilterPrunerMasker, "fpgm": FPGMPrunerMasker}


@dataclass
class ChannelGroupPlan:
    """One group of coupled layers: its members, coupled channels, how many can go and how many went."""

    layers: list[str]
    channels: int
    prunable: int
    pruned: int
    sparsity: float


class GroupFilterPruner(Pruner):
    """Filter pruning where coupled layers (residual streams, depthwise chains) lose the same channels.

    ``importance`` picks the per-filter score summed over a group: ``"l1"`` (default), ``"l2"`` or
    ``"fpgm"``. A group is pruned at the smallest sparsity among its selected members, counting its coupled
    channels: ``num_to_prune(s, channels)`` of the prunable ones go. A channel that an unselected layer
    also produces, or that reaches the model output or an op the speedup cannot shrink, is never masked
    (the speedup would keep it anyway). Layers that did not run on ``dummy_input`` are left unpruned with a
    warning. After :meth:`compress`, ``groups`` lists every group with its counts.
    """

    default_op_types = ("Conv2d", "Linear")
    supported_op_types = FILTER_OP_TYPES

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
        importance: str = "l1",
    ) -> None:
        if importance not in GROUP_IMPORTANCE:
            raise PruningConfigError(
                f"{type(self).__name__} importance must be one of {', '.join(GROUP_IMPORTANCE)}, got {importance!r}."
            )
        if dummy_input is None:
            raise PruningConfigError(
                f"{type(self).__name__} needs dummy_input (an input the model accepts) to find which layers' "
                "channels are coupled; pass dummy_input=torch.randn(1, C, H, W) or the model's example inputs."
            )
        if isinstance(model, nn.Module):
            self.graph: ChannelGraph = trace_channels(model, dummy_input)  # traced before the layers are wrapped
        self.importance = importance
        self.groups: list[ChannelGroupPlan] = []
        self.skipped: list[str] = []
        super().__init__(model, config_list, optimizer, dummy_input)
        self.masker = GROUP_IMPORTANCE[importance](model, self)

    @torch.no_grad()
    def update_mask(self) -> None:
        """Compute every group's masks at once (one-shot: later calls keep the masks)."""
        if not self.modules_wrapper or all(w.if_calculated for w in self.modules_wrapper):
            return
        wrappers = {w.name: (i, w) for i, w in enumerate(self.modules_wrapper)}
        roots = self.graph.uf.roots()
        classes = {name: self._classes(name, roots) for name in wrappers}
        self.skipped = [name for name, c in classes.items() if c is None]
        if self.skipped:
            warnings.warn(
                f"{type(self).__name__}: {self.skipped} did not run on dummy_input as Conv/Linear producers (or "
                "sit inside an attention block), so they were left unpruned.", UserWarning, stacklevel=2)
        located = {n: c for n, c in classes.items() if c is not None}
        locked = self._locked_classes(roots, set(located))
        keep: dict[str, torch.Tensor] = {}
        self.groups = []
        for members in _components(located):
            score: dict[int, float] = {}
            for name in members:
                idx, wrapper = wrappers[name]
                imp = self.masker.get_channel_importance(wrapper, idx).detach().float().flatten().cpu()
                already = wrapper.weight_mask.detach().reshape(wrapper.weight_mask.shape[0], -1).sum(1) == 0
                imp = imp.masked_fill(already.cpu(), -math.inf)
                for c, value in zip(located[name].tolist(), imp.tolist(), strict=True):
                    if c >= 0:
                        score[c] = score.get(c, 0.0) + value
            all_classes = sorted(score)
            candidates = [c for c in all_classes if c not in locked]
            sparsity = min(float(wrappers[n][1].config["sparsity"]) for n in members)
            k = min(num_to_prune(sparsity, len(all_classes)), len(candidates))
            order = lowest_indices(torch.tensor([score[c] for c in candidates], dtype=torch.float64), k)
            dropped = {candidates[i] for i in order.tolist()}
            self.groups.append(ChannelGroupPlan(members, len(all_classes), len(candidates), len(dropped), sparsity))
            for name in members:
                keep[name] = torch.tensor([c not in dropped for c in located[name].tolist()], dtype=torch.float32)
        for name, (_, wrapper) in wrappers.items():
            if name in keep:
                self._store_masks(wrapper, channel_masks(wrapper, keep[name]))
            wrapper.if_calculated = True

    def _classes(self, name: str, roots: np.ndarray) -> np.ndarray | None:
        """The coupled-channel class of each output channel of ``name`` (-1 = untracked), or None."""
        space = self.graph.spaces.get(f"{name}#out")
        ids = space.ids if space is not None else None
        rec = self.graph.leaves.get(name)
        if ids is None and rec is not None and rec.kind == "depthwise" and rec.out_ids is not None:
            ids = rec.out_ids
        if ids is None or rec is None or rec.kind not in ("conv", "depthwise", "linear"):
            return None
        return np.where(ids >= 0, roots[np.maximum(ids, 0)], -1)

    def _locked_classes(self, roots: np.ndarray, selected: set[str]) -> set[int]:
        """Classes the speedup keeps whatever the masks say: pinned, or produced by an unselected layer."""
        locked: set[int] = set()
        for pin in self.graph.pins:
            locked.update(roots[pin.ids].tolist())
        for space in self.graph.spaces.values():
            if space.kind != "out" or space.owner not in selected:
                locked.update(roots[space.ids].tolist())
        return locked


def _components(classes: Mapping[str, np.ndarray]) -> list[list[str]]:
    """Group layer names that share at least one channel class (in model order)."""
    names = list(classes)
    parent = list(range(len(names)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[int, int] = {}
    for i, name in enumerate(names):
        for c in np.unique(classes[name]).tolist():
            if c >= 0:
                j = owner.setdefault(c, i)
                parent[find(i)] = find(j)
    comps: dict[int, list[str]] = {}
    for i, name in enumerate(names):
        comps.setdefault(find(i), []).append(name)
    return list(comps.values())


class GroupL1FilterPruner(GroupFilterPruner):
    """Group-aware L1 filter pruning: coupled channels are scored by the summed L1 norm of their filters."""

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
    ) -> None:
        super().__init__(model, config_list, optimizer, dummy_input, importance="l1")


class GroupL2FilterPruner(GroupFilterPruner):
    """Group-aware L2 filter pruning: coupled channels are scored by the summed L2 norm of their filters."""

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
    ) -> None:
        super().__init__(model, config_list, optimizer, dummy_input, importance="l2")
