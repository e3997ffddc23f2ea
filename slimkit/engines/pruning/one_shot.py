"""One-shot pruners that need only the weights: level (unstructured), L1/L2 filter, FPGM, Slim (BatchNorm)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.dependency import DependencyAwarePruner
from slimkit.engines.pruning.maskers import (
    FPGMPrunerMasker,
    L1FilterPrunerMasker,
    L2FilterPrunerMasker,
    LevelPrunerMasker,
    SlimPrunerMasker,
)
from slimkit.engines.pruning.training import check_positive_int

FILTER_OP_TYPES: tuple[str, ...] = ("Conv1d", "Conv2d", "Conv3d", "Linear", "Conv1D")
LEVEL_OP_TYPES: tuple[str, ...] = ("Conv1d", "Conv2d", "Conv3d", "Linear")


class LevelEngine(Pruner):
    """Unstructured pruning: zero the ``sparsity`` fraction of each layer's weights.

    ``method="l1"`` (default, NNI's level pruner) zeroes the smallest magnitudes; ``"random"`` a seeded random
    subset (a baseline). ``"default"`` op types: Conv1d/2d/3d and Linear; any layer with a ``weight`` may be
    named explicitly.
    """

    user_name = "LevelPruner"  # NNI 1.x's name for it (slimkit.faces.nni.v1)
    default_op_types = LEVEL_OP_TYPES
    supported_op_types = None
    masker_class = LevelPrunerMasker

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        method: str = "l1",
        seed: int = 0,
        dummy_input: Any = None,
    ) -> None:
        if method not in ("l1", "random"):
            raise PruningConfigError(f"LevelPruner method must be 'l1' or 'random', got {method!r}.")
        self.method, self.seed = method, check_positive_int("LevelPruner", "seed", seed, minimum=0)
        super().__init__(model, config_list, optimizer, dummy_input)


class WeightFilterPruner(DependencyAwarePruner):
    """Base of the filter pruners that rank by weights alone: prune output channels (dim 0) of Conv/Linear.

    ``dependency_aware=True`` (with ``dummy_input``) gives coupled layers one shared channel decision, so the
    sparsity after ``ModelSpeedup`` is the sparsity asked for, and ``dims`` (``["mlp", "heads", "hidden"]`` or
    ``{"hidden": 0.3, ...}``) what is cut; see :mod:`slimkit.engines.pruning.dependency`.
    """

    default_op_types = ("Conv2d", "Linear", "Conv1D")
    supported_op_types = FILTER_OP_TYPES
    masker_class = L1FilterPrunerMasker

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        dependency_aware: bool = False,
        dummy_input: Any = None,
        dims: Any = None,
        round_to: int = 1,
    ) -> None:
        self._init_dependency(model, dependency_aware, dummy_input, dims, round_to)
        super().__init__(model, config_list, optimizer, dummy_input)


class L1FilterPruner(WeightFilterPruner):
    """Prune the output filters with the smallest L1 norm (Conv2d and Linear by default; the base's masker)."""


class L2FilterPruner(WeightFilterPruner):
    """Prune the output filters with the smallest L2 norm (Conv2d and Linear by default)."""

    masker_class = L2FilterPrunerMasker


class FPGMEngine(WeightFilterPruner):
    """Prune the filters nearest the geometric median of their layer (Conv2d and Linear by default)."""

    user_name = "FPGMPruner"  # NNI 1.x's name for it (slimkit.faces.nni.v1)
    masker_class = FPGMPrunerMasker


class SlimEngine(Pruner):
    """Network Slimming: prune BatchNorm channels with the smallest ``|gamma|``.

    Masks land on the BatchNorm layers' weight and bias (``op_types: ["BatchNorm2d"]``, also the default).
    ``scope="global"`` (the paper's choice) ranks channels over all selected BN layers together and prunes
    ``floor(s * total_channels)`` of them (each layer keeps at least one), so every selected layer must share
    one sparsity; ``scope="layer"`` prunes each BN layer to its own sparsity. Train with an L1 penalty on the
    BN scales beforehand for the best results.
    """

    user_name = "SlimPruner"  # NNI 1.x's name for it (slimkit.faces.nni.v1)
    default_op_types = ("BatchNorm2d",)
    supported_op_types = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")
    masker_class = SlimPrunerMasker

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        scope: str = "global",
        dummy_input: Any = None,
    ) -> None:
        if scope not in ("global", "layer"):
            raise PruningConfigError(f"SlimPruner scope must be 'global' or 'layer', got {scope!r}.")
        self.scope = scope
        super().__init__(model, config_list, optimizer, dummy_input)

    def _select_layers(self) -> list[tuple[str, nn.Module, dict[str, Any]]]:
        layers = super()._select_layers()
        sparsities = sorted({config["sparsity"] for _, _, config in layers})
        if self.scope == "global" and len(sparsities) > 1:
            raise PruningConfigError(
                f"SlimPruner with scope='global' needs one sparsity for all BatchNorm layers, got {sparsities}; "
                "use a single sparsity or pass scope='layer'."
            )
        return layers

    @torch.no_grad()
    def update_mask(self) -> None:
        """Global scope: rank all BN channels together once; layer scope: the per-layer default."""
        if self.scope == "layer":
            super().update_mask()
            return
        pending = [w for w in self.modules_wrapper if not w.if_calculated]
        if not pending:
            return
        all_masks = self.masker.calc_global_masks(pending[0].config["sparsity"], self.modules_wrapper)
        for wrapper, masks in zip(self.modules_wrapper, all_masks, strict=True):
            self._store_masks(wrapper, masks)
            wrapper.if_calculated = True
