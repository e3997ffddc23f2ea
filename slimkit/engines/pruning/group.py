"""Group-aware filter pruners: the filter pruners with ``dependency_aware=True``, under their older names.

``GroupL1FilterPruner(model, config_list, dummy_input=x)`` is ``L1FilterPruner(model, config_list,
dependency_aware=True, dummy_input=x)`` (same for L2); ``GroupFilterPruner(..., importance="l1"|"l2"|"fpgm")``
picks the criterion by name. There is one implementation,
:class:`~slimkit.engines.pruning.dependency.DependencyAwarePruner`; these thin subclasses only fix the flag
so configs and code using the old names keep working.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.coupling import ChannelGroupPlan
from slimkit.engines.pruning.maskers import FPGMPrunerMasker, L1FilterPrunerMasker, L2FilterPrunerMasker
from slimkit.engines.pruning.one_shot import L1FilterPruner, L2FilterPruner, WeightFilterPruner

__all__ = ["GROUP_IMPORTANCE", "ChannelGroupPlan", "GroupFilterPruner", "GroupL1FilterPruner", "GroupL2FilterPruner"]

GROUP_IMPORTANCE: dict[str, type] = {"l1": L1FilterPrunerMasker, "l2": L2FilterPrunerMasker, "fpgm": FPGMPrunerMasker}


class GroupFilterPruner(WeightFilterPruner):
    """Dependency-aware filter pruning with the criterion chosen by name.

    ``importance`` is ``"l1"`` (default, as :class:`L1FilterPruner`), ``"l2"`` or ``"fpgm"``; ``dummy_input``
    is required. Equivalent to the matching filter pruner with ``dependency_aware=True``.
    """

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
                f"{self.display_name()} importance must be one of {', '.join(GROUP_IMPORTANCE)}, got {importance!r}."
            )
        self.importance = importance
        self.masker_class = GROUP_IMPORTANCE[importance]
        super().__init__(model, config_list, optimizer, dependency_aware=True, dummy_input=dummy_input)


class _AlwaysDependencyAware:
    """Mixin: the filter pruner it precedes always runs with ``dependency_aware=True``."""

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
    ) -> None:
        super().__init__(model, config_list, optimizer, dependency_aware=True, dummy_input=dummy_input)


class GroupL1FilterPruner(_AlwaysDependencyAware, L1FilterPruner):
    """``L1FilterPruner`` with ``dependency_aware=True`` (``dummy_input`` is required)."""


class GroupL2FilterPruner(_AlwaysDependencyAware, L2FilterPruner):
    """``L2FilterPruner`` with ``dependency_aware=True`` (``dummy_input`` is required)."""
