"""Filter pruners that rank channels with data: Taylor first-order, APoZ, mean activation.

Each needs a few batches. Give either ``dataloader`` (any iterable of batches; a batch is ``(inputs,
targets)``, a mapping of keyword inputs, or a tensor) and, for Taylor, ``criterion(output, targets)`` — or a
``trainer(model, optimizer, criterion, epoch)`` that runs one epoch of the user's own loop (statistics are
taken from its first ``statistics_batch_num`` batches; needs ``optimizer``) — or only ``optimizer`` and train
after ``compress()``: the masks are computed after ``statistics_batch_num`` of those steps (NNI 1.x).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.compression.pruning.config import PruningConfigError
from slimkit.compression.pruning.dependency import DependencyAwarePruner
from slimkit.compression.pruning.maskers import StructuredWeightMasker
from slimkit.compression.pruning.one_shot import FILTER_OP_TYPES
from slimkit.compression.pruning.wrapper import PrunerModuleWrapper
from slimkit.compression.speedup.layers import is_linear, out_dim, out_major
from slimkit.data.batches import split_batch
from slimkit.errors import DataError
from slimkit.utils import main_tensor, run_model

Trainer = Callable[[nn.Module, Any, Any, int], Any]


class _DataDrivenPruner(DependencyAwarePruner):
    """Shared plumbing: run a few batches (own loop or the user's trainer) before computing masks.

    ``dependency_aware=True`` (with ``dummy_input``) gives coupled layers one shared channel decision, scored by
    the summed data statistics; see :mod:`slimkit.compression.pruning.dependency`.
    """

    default_op_types = ("Conv2d", "Linear", "Conv1D")
    supported_op_types = FILTER_OP_TYPES

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        trainer: Trainer | None = None,
        criterion: Callable[..., torch.Tensor] | None = None,
        dataloader: Iterable[Any] | None = None,
        statistics_batch_num: int = 1,
        dummy_input: Any = None,
        dependency_aware: bool = False,
        dims: Any = None,
    ) -> None:
        if isinstance(statistics_batch_num, bool) or not isinstance(statistics_batch_num, int) or (
            statistics_batch_num < 1
        ):
            raise PruningConfigError(f"statistics_batch_num must be an int >= 1, got {statistics_batch_num!r}.")
        if trainer is not None and optimizer is None:
            raise PruningConfigError(f"{type(self).__name__}(trainer=...) also needs optimizer=... to train with.")
        self.trainer = trainer
        self.criterion = criterion
        self.dataloader = dataloader
        self.statistics_batch_num = statistics_batch_num
        self._init_dependency(model, dependency_aware, dummy_input, dims)
        super().__init__(model, config_list, optimizer, dummy_input)
        self._setup()

    def _setup(self) -> None:
        """Subclass hook: wrapper attributes and masker, run once the layers are wrapped."""

    def _batches(self) -> list[tuple[Any, Any]]:
        batches = [split_batch(b) for b in itertools.islice(iter(self.dataloader), self.statistics_batch_num)]
        if not batches:
            raise DataError(f"{type(self).__name__}: the dataloader yielded no batch; give it at least one.")
        return batches

    def _collect_statistics(self) -> None:
        raise NotImplementedError

    def _run_trainer(self) -> None:
        self.trainer(self.bound_model, self.optimizer, self.criterion, 0)

    def compress(self) -> nn.Module:
        """Collect statistics from data (unless every mask is already known), then compute masks.

        With only ``optimizer=`` (NNI 1.x / Auptimizer scripts that train after ``compress()``) the statistics
        are taken from the next ``statistics_batch_num`` steps of the user's own training, and the masks are
        computed after the last of them (:attr:`statistics_pending` counts the steps still to come).
        """
        if not all(w.if_calculated for w in self.modules_wrapper):
            if self.dataloader is None and self.trainer is None:
                if self.optimizer is None:
                    raise PruningConfigError(
                        f"{type(self).__name__} ranks filters with data: pass dataloader=... (and criterion=... "
                        "for Taylor), trainer=... with optimizer=..., or optimizer=... alone and train after "
                        "compress() (the masks follow after statistics_batch_num steps)."
                    )
                if not self.statistics_pending:
                    self.statistics_pending = self.statistics_batch_num
                    self._start_collecting()
                return self.bound_model
            with self.expert_statistics():
                self._collect_statistics()
        return super().compress()

    statistics_pending: int = 0

    def _start_collecting(self) -> None:
        """Start taking statistics from the user's training steps (subclasses)."""
        raise NotImplementedError

    def _stop_collecting(self) -> None:
        """Stop taking statistics (subclasses)."""

    def _on_optimizer_step(self) -> None:
        """While statistics are pending, count the step; after the last one, compute the masks."""
        if self.statistics_pending:
            self.statistics_pending -= 1
            if not self.statistics_pending:
                self._stop_collecting()
                self.update_mask()
        super()._on_optimizer_step()


class TaylorFOWeightFilterPrunerMasker(StructuredWeightMasker):
    """Filter importance = mean over batches of ``(sum over the filter of weight * grad)^2`` (Molchanov 2019)."""

    def get_channel_importance(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None) -> torch.Tensor:
        """The Taylor contribution the pruner accumulated for this layer."""
        if wrapper.contribution is None or wrapper.contribution_batches == 0:
            raise DataError(f"No gradient statistics for layer {wrapper.name!r}; did its forward run on the data?")
        return wrapper.contribution / wrapper.contribution_batches


class TaylorFOWeightFilterPruner(_DataDrivenPruner):
    """Prune filters whose removal changes the loss least, by a first-order Taylor estimate.

    With ``dataloader`` the loss is ``criterion(main output, targets)`` (or ``output.loss`` for Hugging Face
    models fed a mapping with labels); gradients are computed in eval mode without changing weights, and
    existing ``.grad`` values are restored afterwards.
    """

    masker_class = TaylorFOWeightFilterPrunerMasker

    def _setup(self) -> None:
        self.set_wrappers_attribute("contribution", None)
        self.set_wrappers_attribute("contribution_batches", 0)
        self._collecting = False
        self._seen = 0

    def _accumulate(self) -> None:
        for wrapper in self.modules_wrapper:
            grad = wrapper.module.weight.grad
            if grad is None:
                continue
            weight = wrapper.module.weight.detach() * wrapper.weight_mask
            score = out_major(wrapper.module, (weight * grad).float()).reshape(grad.shape[out_dim(wrapper.module)],
                                                                               -1).sum(dim=1).pow(2)
            wrapper.contribution = score if wrapper.contribution is None else wrapper.contribution + score
            wrapper.contribution_batches += 1

    def _start_collecting(self) -> None:
        self._collecting, self._seen = True, 0

    def _stop_collecting(self) -> None:
        self._collecting = False

    def _before_optimizer_step(self) -> None:
        if self._collecting and self._seen < self.statistics_batch_num:
            self._accumulate()
            self._seen += 1

    def _loss(self, output: Any, targets: Any) -> torch.Tensor:
        if self.criterion is not None:
            if targets is None:
                raise DataError("TaylorFOWeightFilterPruner: criterion given but the batches carry no targets.")
            return self.criterion(main_tensor(output), targets)
        loss = getattr(output, "loss", None) if not isinstance(output, Mapping) else output.get("loss")
        if not isinstance(loss, torch.Tensor):
            raise PruningConfigError(
                "TaylorFOWeightFilterPruner needs criterion=loss_fn(output, targets) unless the model returns "
                "a .loss (Hugging Face models fed labels)."
            )
        return loss

    def _collect_statistics(self) -> None:
        if self.dataloader is None:
            self._collecting, self._seen = True, 0
            try:
                self._run_trainer()
            finally:
                self._collecting = False
            return
        model = self.bound_model
        params = list(model.parameters())
        saved = [p.grad for p in params]
        was_training = model.training
        model.eval()
        try:
            for inputs, targets in self._batches():
                for p in params:
                    p.grad = None
                with torch.enable_grad():
                    self._loss(run_model(model, inputs), targets).backward()
                self._accumulate()
        finally:
            for p, g in zip(params, saved, strict=True):
                p.grad = g
            model.train(was_training)


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
    ) -> None:
        if isinstance(activation, str) and activation not in _ACTIVATIONS:
            raise PruningConfigError(
                f"activation {activation!r} is unknown; use one of {sorted(_ACTIVATIONS)} or a callable."
            )
        self.activation = _ACTIVATIONS[activation] if isinstance(activation, str) else activation
        super().__init__(
            model, config_list, optimizer, trainer, criterion, dataloader, statistics_batch_num, dummy_input,
            dependency_aware, dims,
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

    def _collect_statistics(self) -> None:
        collector_id = self.add_activation_collector(self._collector)
        try:
            if self.dataloader is None:
                self._run_trainer()
                return
            was_training = self.bound_model.training
            self.bound_model.eval()
            try:
                with torch.no_grad():
                    for inputs, _ in self._batches():
                        run_model(self.bound_model, inputs)
            finally:
                self.bound_model.train(was_training)
        finally:
            self.remove_activation_collector(collector_id)


class ActivationAPoZRankFilterPruner(_ActivationRankPruner):
    """Prune the filters whose activations (after ``activation``, ReLU by default) are most often zero."""

    masker_class = ActivationAPoZRankFilterPrunerMasker
    count_zeros = True


class ActivationMeanRankFilterPruner(_ActivationRankPruner):
    """Prune the filters with the smallest mean activation (after ``activation``, ReLU by default)."""

    masker_class = ActivationMeanRankFilterPrunerMasker
    count_zeros = False
