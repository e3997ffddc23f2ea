"""Activation-ranked filter pruning: APoZ (Hu et al., 2016) and mean activation (Molchanov et al., 2017).

Each wrapped layer's output passes through ``activation`` (ReLU by default) on a few batches of
``dataloader``, of the user's ``trainer``, or of the user's own training steps after ``compress()`` (see
:mod:`~slimkit.engines.pruning.data_driven`); the filters whose activations are most often zero (APoZ) or
smallest on average (mean) go.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.data_driven import Trainer, _DataDrivenPruner
from slimkit.engines.pruning.maskers import StructuredWeightMasker
from slimkit.engines.pruning.wrapper import PrunerModuleWrapper
from slimkit.engines.speedup.layers import is_linear
from slimkit.errors import DataError

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "relu6": lambda t: torch.clamp(t, 0.0, 6.0),
}


class _ActivationMasker(StructuredWeightMasker):
    def stats(self, wrapper: PrunerModuleWrapper) -> tuple[torch.Tensor, int]:
        if not wrapper.collected_activation:
            raise DataError(f"No activations collected for layer {wrapper.name!r}; did its forward run on the data?")
        return torch.stack(wrapper.collected_activation).sum(dim=0), sum(wrapper.collected_count)


class ActivationAPoZRankFilterPrunerMasker(_ActivationMasker):
    """Importance = 1 - APoZ (average percentage of zeros in the channel's activation; Hu et al., 2016)."""

    def get_channel_importance(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None) -> torch.Tensor:
        """One minus the fraction of zero activations per channel."""
        zeros, count = self.stats(wrapper)
        return 1.0 - zeros / count


class ActivationMeanRankFilterPrunerMasker(_ActivationMasker):
    """Importance = mean activation of the channel (Molchanov et al., 2017)."""

    def get_channel_importance(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None) -> torch.Tensor:
        """Mean activation per channel."""
        total, count = self.stats(wrapper)
        return total / count


class _ActivationRankPruner(_DataDrivenPruner):
    """Collect activation statistics of each wrapped layer's output through an activation collector."""

    masker_class = ActivationAPoZRankFilterPrunerMasker
    count_zeros = True

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        trainer: Trainer | None = None,
        criterion: Callable[..., torch.Tensor] | None = None,
        activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu",
        dataloader: Iterable[Any] | None = None,
        statistics_batch_num: int = 1,
        dummy_input: Any = None,
        dependency_aware: bool = False,
        dims: Any = None,
        sparsifying_training_batches: int | None = None,
    ) -> None:
        if isinstance(activation, str) and activation not in _ACTIVATIONS:
            raise PruningConfigError(
                f"activation {activation!r} is unknown; use one of {sorted(_ACTIVATIONS)} or a callable."
            )
        self.activation = _ACTIVATIONS[activation] if isinstance(activation, str) else activation
        super().__init__(
            model, config_list, optimizer, trainer, criterion, dataloader, statistics_batch_num, dummy_input,
            dependency_aware, dims, sparsifying_training_batches,
        )

    def _setup(self) -> None:
        self.set_wrappers_attribute("collected_activation", [])
        self.set_wrappers_attribute("collected_count", [])

    def _collector(self, wrapper: PrunerModuleWrapper, inputs: tuple, output: Any) -> None:
        if len(wrapper.collected_activation) >= self.statistics_batch_num or not isinstance(output, torch.Tensor):
            return
        channel_dim = -1 if is_linear(wrapper.module) else 1
        act = self.activation(output.detach()).float().movedim(channel_dim, 0)
        act = act.reshape(act.shape[0], -1)
        wrapper.collected_activation.append((act == 0).sum(dim=1).float() if self.count_zeros else act.sum(dim=1))
        wrapper.collected_count.append(act.shape[1])

    def _start_collecting(self) -> None:
        self._collector_id = self.add_activation_collector(self._collector)

    def _stop_collecting(self) -> None:
        self.remove_activation_collector(self._collector_id)


class ActivationAPoZRankFilterPruner(_ActivationRankPruner):
    """Prune the filters whose activations (after ``activation``, ReLU by default) are most often zero."""

    masker_class = ActivationAPoZRankFilterPrunerMasker
    count_zeros = True


class ActivationMeanRankFilterPruner(_ActivationRankPruner):
    """Prune the filters with the smallest mean activation (after ``activation``, ReLU by default)."""

    masker_class = ActivationMeanRankFilterPrunerMasker
    count_zeros = False
