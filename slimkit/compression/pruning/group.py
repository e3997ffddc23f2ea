"""Group-aware filter pruning: layers whose output channels are coupled drop the *same* channels.

Per-layer filter pruners rank each layer on its own. When layers are coupled (a residual add joins their
outputs, a depthwise conv follows an expansion), the speedup can only remove a channel that *every*
coupled producer dropped, so independently chosen masks mostly cancel out and the residual stream does
not shrink. The pruners here trace the model once (``dummy_input`` is required), group the selected layers
by shared channels, score each coupled channel by the sum of its members' filter importances, and mask
the lowest-scoring channels in every member at once. Masks are then exactly what ``ModelSpeedup`` removes.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from slimkit.compression.pruning.compressor import Pruner
from slimkit.compression.pruning.config import PruningConfigError
from slimkit.compression.pruning.coupling import ChannelCoupling, ChannelGroupPlan
from slimkit.compression.pruning.maskers import FPGMPrunerMasker, L1FilterPrunerMasker, L2FilterPrunerMasker
from slimkit.compression.pruning.one_shot import FILTER_OP_TYPES

__all__ = ["GROUP_IMPORTANCE", "ChannelGroupPlan", "GroupFilterPruner", "GroupL1FilterPruner", "GroupL2FilterPruner"]

GROUP_IMPORTANCE: dict[str, type] = {"l1": L1FilterPrunerMasker, "l2": L2FilterPrunerMasker, "fpgm": FPGMPrunerMasker}


class GroupFilterPruner(Pruner):
    """Filter pruning where coupled layers (residual streams, depthwise chains) lose the same channels.

    ``importance`` picks the per-filter score summed over a group: ``"l1"`` (default), ``"l2"`` or
    ``"fpgm"``. A group is pruned at the smallest sparsity among its selected members, counting its coupled
    channels: ``num_to_prune(s, channels)`` of the prunable ones go. A channel that an unselected layer
    also produces, or that reaches the model output or an op the speedup cannot shrink, is never masked
    (the speedup would keep it anyway). Layers that did not run on ``dummy_input`` are left unpruned with a
    warning. After :meth:`compress`, ``groups`` lists every group with its counts. The decisions are made by
    :meth:`ChannelCoupling.reconcile <slimkit.compression.pruning.coupling.ChannelCoupling.reconcile>`.
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
            self.coupling = ChannelCoupling(model, dummy_input)  # traced before the layers are wrapped
            self.graph = self.coupling.graph
        self.importance = importance
        self.groups: list[ChannelGroupPlan] = []
        self.skipped: list[str] = []
        self.masker = GROUP_IMPORTANCE[importance](model, self)
        super().__init__(model, config_list, optimizer, dummy_input)

    @torch.no_grad()
    def update_mask(self) -> None:
        """Compute every group's masks at once (one-shot: later calls keep the masks)."""
        if not self.modules_wrapper or all(w.if_calculated for w in self.modules_wrapper):
            return
        self.skipped = [w.name for w in self.modules_wrapper if self.coupling.layer_classes(w.name) is None]
        if self.skipped:
            warnings.warn(
                f"{type(self).__name__}: {self.skipped} did not run on dummy_input as Conv/Linear producers (or "
                "sit inside an attention block), so they were left unpruned.", UserWarning, stacklevel=2)
        self.groups = self.coupling.reconcile(self, lock=True, balance=False)
        for wrapper in self.modules_wrapper:
            wrapper.if_calculated = True


class _FixedImportancePruner(GroupFilterPruner):
    """A group pruner whose importance is fixed by the class (``fixed_importance``)."""

    fixed_importance: ClassVar[str] = "l1"

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
    ) -> None:
        super().__init__(model, config_list, optimizer, dummy_input, importance=self.fixed_importance)


class GroupL1FilterPruner(_FixedImportancePruner):
    """Group-aware L1 filter pruning: coupled channels are scored by the summed L1 norm of their filters."""

    fixed_importance = "l1"


class GroupL2FilterPruner(_FixedImportancePruner):
    """Group-aware L2 filter pruning: coupled channels are scored by the summed L2 norm of their filters."""

    fixed_importance = "l2"
