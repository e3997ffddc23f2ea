"""Dependency-aware filter pruning (NNI's ``dependency_aware=True, dummy_input=...``), by dimension.

Filter pruners rank each layer on its own. When layers are coupled (a residual add joins their outputs, a
depthwise conv follows an expansion, a concatenation feeds one depthwise conv, a gate multiplies two
projections), the speedup can only remove a channel that *every* coupled producer dropped, so independently
chosen masks mostly cancel out and the model barely shrinks. With ``dependency_aware=True`` the pruner traces
the model once on ``dummy_input``, groups the selected layers by shared channels, scores each coupled channel
by the sum of its members' importances (the pruner's own criterion: L1, L2, FPGM, APoZ, mean activation,
Taylor, channel energy) and masks the lowest-scoring channels in every member at once.

``dims`` (see :mod:`~slimkit.engines.pruning.dims`) says what may be cut and at which ratio: ``"mlp"``
(channels inside blocks, and each MoE expert's intermediate channels), ``"heads"`` (whole key/value-head
groups of the attention blocks whose q/k/v projections are all selected, scored by the summed importance of
their rows) and ``"hidden"`` (the residual stream: with it the embeddings and MoE experts modules that feed
it are masked too, in :attr:`DependencyAwarePruner.extra_masks`, which :meth:`get_masks` includes). Without a
ratio a dimension is cut at the smallest sparsity among its layers. ``round_to`` (Torch-Pruning's) makes
every coupled channel group keep a multiple of that many channels (nearest multiple, never 0 nor above the
width), so CPU conv kernels that work in blocks of 16 get widths on their grid. The masks are exactly what
:class:`~slimkit.engines.speedup.ModelSpeedup` removes.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.coupling import ChannelCoupling
from slimkit.engines.pruning.dims import Dims, parse_dims, ratio_for
from slimkit.engines.pruning.experts import RoutedEnergy, weight_importance
from slimkit.engines.pruning.io import Masks
from slimkit.engines.pruning.maskers import (
    L1FilterPrunerMasker,
    StructuredWeightMasker,
    channel_masks,
    check_round_to,
    lowest_indices,
    num_to_prune,
)
from slimkit.engines.pruning.reconcile import ChannelGroupPlan

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
    dims: Dims | None = None
    #: every coupled channel group keeps a multiple of this many channels (1: as the sparsity gives them)
    round_to: int = 1

    def _init_dependency(self, model: nn.Module, dependency_aware: bool, dummy_input: Any, dims: Any = None,
                         round_to: int = 1) -> None:
        """Validate the flag and, when it is on, trace ``model`` on ``dummy_input`` for the channel coupling."""
        name = self.display_name()
        self.set_round_to(round_to)
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
        self.dims = parse_dims(dims, f"{name} dims") if dims is not None else None
        if self.dims is not None and not dependency_aware:
            raise PruningConfigError(f"{name} dims needs dependency_aware=True (and dummy_input): the dimensions "
                                     "are found by tracing the model.")
        self.dependency_aware = dependency_aware
        self.groups: list[ChannelGroupPlan] = []
        self.skipped: list[str] = []
        self.extra_masks: Masks = {}
        self._routed: RoutedEnergy | None = None
        self.coupling = ChannelCoupling(model, dummy_input) if dependency_aware and isinstance(model, nn.Module) \
            else None
        self.graph = None if self.coupling is None else self.coupling.graph

    def use_coupling(self, coupling: ChannelCoupling, dims: Any = None, round_to: int = 1) -> None:
        """Turn dependency-aware pruning on with a trace already made (the smash pruners share theirs).

        ``round_to``: each coupled channel group keeps a multiple of it (see :meth:`set_round_to`).
        """
        self.set_round_to(round_to)
        self.dependency_aware, self.coupling, self.graph = True, coupling, coupling.graph
        self.dims = parse_dims(dims, f"{self.display_name()} dims") if dims is not None else None

    def set_round_to(self, round_to: int) -> None:
        """Round each coupled group's kept channel count to the nearest multiple of ``round_to`` (an int >= 1).

        Torch-Pruning's ``round_to``: widths on a multiple of 16 avoid oneDNN's slow padded reorders on CPU. The
        count stays within ``[round_to, width]`` (see :func:`~slimkit.engines.pruning.maskers.rounded_num_to_prune`);
        head groups and MoE experts are not rounded.
        """
        self.round_to = check_round_to(round_to, f"{self.display_name()} round_to")

    def _active(self, dim: str) -> bool:
        return self.dims is None or dim in self.dims

    def _ratio(self, dim: str, names: list[str]) -> float:
        fallback = [float(w.config["sparsity"]) for w in self.modules_wrapper if w.name in names] or [
            float(w.config["sparsity"]) for w in self.modules_wrapper] or [0.0]
        return ratio_for(self.dims or {}, dim, min(fallback))

    @contextlib.contextmanager
    def expert_statistics(self) -> Iterator[None]:
        """While data flows, record each MoE expert's routed activations (for its intermediate channels)."""
        modules = self._expert_modules()
        if not modules:
            yield
            return
        self._routed = RoutedEnergy(modules)
        with self._routed:
            yield

    def _expert_modules(self) -> dict[str, nn.Module]:
        if self.coupling is None or not self._active("mlp"):
            return {}
        excluded = {n for e in self.config_list if e.get("exclude") for n in e.get("op_names", ())}
        return {n: self.coupling.graph.leaves[n].module for n in self.coupling.experts if n not in excluded}

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
                f"{self.display_name()}: {self.skipped} did not run on dummy_input as Conv/Linear producers (or "
                "are attention projections whose q/k/v are not all selected), so they were left unpruned.",
                UserWarning, stacklevel=2)
        self.groups = self.coupling.reconcile(self, lock=True, balance=False, dims=self.dims,
                                             round_to=self.round_to) + heads
        self.groups += self._prune_experts()
        for wrapper in self.modules_wrapper:
            wrapper.if_calculated = True

    def _prune_heads(self) -> list[ChannelGroupPlan]:
        """Mask whole key/value-head groups of every traced attention block whose q/k/v layers are all wrapped.

        The output projection keeps its rows (they are the residual stream, decided with its other producers);
        the speedup removes the pruned heads' columns from it.
        """
        if not isinstance(self.masker, StructuredWeightMasker) or not self._active("heads"):
            return []
        wrappers = {w.name: (i, w) for i, w in enumerate(self.modules_wrapper)}
        plans = []
        for att in self.coupling.graph.attention.values():
            names = att.projections()
            if not all(n in wrappers for n in names):
                continue
            score = self.head_importance(att)
            if score is None:  # the criterion on the q/k/v rows of each group
                score = torch.zeros(att.num_kv_heads, dtype=torch.float64)
                for name, group in att.row_groups().items():
                    idx, wrapper = wrappers[name]
                    importance = self.masker.get_channel_importance(wrapper, idx).detach().double().flatten().cpu()
                    score.index_add_(0, torch.from_numpy(group), importance)
            sparsity = self._ratio("heads", names)
            pruned = num_to_prune(sparsity, att.num_kv_heads)
            keep = np.ones(att.num_kv_heads, dtype=bool)
            keep[lowest_indices(score, pruned).numpy()] = False
            rows = att.rows(keep)
            self.apply_masks({name: channel_masks(wrappers[name][1], torch.tensor(
                np.isin(np.arange(len(group)), rows[name]), dtype=torch.float32))
                for name, group in att.row_groups().items()})
            members = names + ([att.o] if att.o in wrappers else [])  # o loses the heads' columns in the speedup
            plans.append(ChannelGroupPlan(members, att.num_kv_heads, att.num_kv_heads, pruned, sparsity, "heads"))
        return plans

    def head_importance(self, att: Any) -> torch.Tensor | None:
        """A per kv-group score of the pruner's own (None: sum the criterion over the group's q/k/v rows)."""
        return None

    def _prune_experts(self) -> list[ChannelGroupPlan]:
        """Each MoE expert keeps the same number of its most important intermediate channels."""
        plans = []
        p = 1 if isinstance(self.masker, L1FilterPrunerMasker) else 2
        for name, module in self._expert_modules().items():
            routed = self._routed.importance(name) if self._routed is not None else None
            importance = routed if routed is not None else weight_importance(module, p)
            experts, inner = importance.shape
            sparsity = self._ratio("mlp", [])
            k = num_to_prune(sparsity, inner)
            kept = torch.stack([torch.sort(torch.argsort(row, stable=True)[k:]).values for row in importance])
            entry = self.extra_masks.setdefault(name, {})
            entry["inner_channels"] = kept
            plans.append(ChannelGroupPlan([name], experts * inner, experts * inner, experts * k, sparsity, "mlp"))
        return plans

    def get_masks(self) -> Masks:
        """The wrapped layers' masks, plus those of embeddings and MoE experts the dimensions cut."""
        masks = super().get_masks()
        for name, entry in self.extra_masks.items():
            masks[name] = {k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in entry.items()}
        return masks

    def unwrap_model(self, apply_masks: bool = False) -> nn.Module:
        """As :meth:`Pruner.unwrap_model`; ``apply_masks=True`` also zeroes the embedding columns cut."""
        if apply_masks:
            with torch.no_grad():
                for name, entry in self.extra_masks.items():
                    if entry.get("weight_mask") is not None:
                        weight = self.bound_model.get_submodule(name).weight
                        weight.mul_(entry["weight_mask"].to(weight))
        return super().unwrap_model(apply_masks)
