"""The plumbing of the filter pruners that rank channels with data (Taylor first-order, APoZ, mean activation).

Each needs a few batches. Give either ``dataloader`` (any iterable of batches; a batch is ``(inputs,
targets)``, a mapping of keyword inputs, or a tensor) and, for Taylor, ``criterion(output, targets)`` — or a
``trainer(model, optimizer, criterion, epoch)`` that runs one epoch of the user's own loop (statistics are
taken from its first ``statistics_batch_num`` batches; needs ``optimizer``) — or only ``optimizer`` and train
after ``compress()``: the masks are computed after ``statistics_batch_num`` of those steps (NNI 1.x).
The pruners themselves: :mod:`~slimkit.engines.pruning.taylor_fo` and
:mod:`~slimkit.engines.pruning.activation_rank`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.data.batches import split_batch
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.dependency import DependencyAwarePruner
from slimkit.engines.pruning.one_shot import FILTER_OP_TYPES
from slimkit.engines.pruning.training import check_positive_int
from slimkit.errors import DataError
from slimkit.evaluation.runtime import eval_mode
from slimkit.utils import run_model

Trainer = Callable[[nn.Module, Any, Any, int], Any]


class _DataDrivenPruner(DependencyAwarePruner):
    """Shared plumbing: run a few batches (own loop or the user's trainer) before computing masks.

    ``dependency_aware=True`` (with ``dummy_input``) gives coupled layers one shared channel decision, scored by
    the summed data statistics; see :mod:`slimkit.engines.pruning.dependency`.
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
        sparsifying_training_batches: int | None = None,
        round_to: int = 1,
    ) -> None:
        if sparsifying_training_batches is not None:  # NNI 2.0-2.5's name for statistics_batch_num
            statistics_batch_num = sparsifying_training_batches
        check_positive_int(self.display_name(), "statistics_batch_num", statistics_batch_num)
        if trainer is not None and optimizer is None:
            raise PruningConfigError(f"{self.display_name()}(trainer=...) also needs optimizer=... to train with.")
        self.trainer = trainer
        self.criterion = criterion
        self.dataloader = dataloader
        self.statistics_batch_num = statistics_batch_num
        self._init_dependency(model, dependency_aware, dummy_input, dims, round_to)
        super().__init__(model, config_list, optimizer, dummy_input)
        self._setup()

    def _setup(self) -> None:
        """Subclass hook: wrapper attributes and masker, run once the layers are wrapped."""

    def _batches(self) -> list[tuple[Any, Any]]:
        batches = [split_batch(b) for b in itertools.islice(iter(self.dataloader), self.statistics_batch_num)]
        if not batches:
            raise DataError(f"{self.display_name()}: the dataloader yielded no batch; give it at least one.")
        return batches

    def _collect_statistics(self) -> None:
        """Collect over the statistics batches through the hooks that also serve the user's training steps."""
        self._start_collecting()
        try:
            self._feed_statistics()
        finally:
            self._stop_collecting()

    def _feed_statistics(self) -> None:
        """Run the statistics batches through the model in eval mode without gradients (or the user's trainer)."""
        if self.dataloader is None:
            self._run_trainer()
            return
        with eval_mode(self.bound_model), torch.no_grad():
            for inputs, _ in self._batches():
                run_model(self.bound_model, inputs)

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
                        f"{self.display_name()} ranks filters with data: pass dataloader=... (and criterion=... "
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
