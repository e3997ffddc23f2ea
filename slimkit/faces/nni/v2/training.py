"""NNI 2.x's pruners that prune while the model trains: ``ADMMPruner`` and ``MovementPruner``.

Each is slimkit's engine (:class:`~slimkit.compression.pruning.admm.ADMMEngine`,
:class:`~slimkit.compression.pruning.movement.MovementEngine`, the algorithms the ``admm`` and ``movement``
registry entries run) behind NNI 2.x's constructor: the user's ``trainer(model, optimizer, criterion)`` runs each
epoch, ``traced_optimizer`` is the optimizer it steps (used only inside ``compress()``), and ``compress()``
returns ``(model, masks)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.compression.pruning.admm import ADMMEngine
from slimkit.compression.pruning.config import PruningConfigError
from slimkit.compression.pruning.movement import MovementEngine
from slimkit.faces.nni.v2.base import V2Pruner, check_training_args, trainer_without_epoch

__all__ = ["ADMMPruner", "MovementPruner"]


class ADMMPruner(V2Pruner, ADMMEngine):
    """ADMM pruning with NNI 2.x's signature, run by slimkit's ``admm`` engine.

    ``ADMMPruner(model, config_list, trainer, traced_optimizer, criterion, iterations, training_epochs,
    granularity="fine-grained")``: ``iterations`` rounds of ``training_epochs`` epochs, each pulling the weights
    towards their sparse projection; ``"fine-grained"`` prunes single weights, ``"coarse-grained"`` filters.
    """

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], trainer: Callable[..., Any] = None,
                 traced_optimizer: Any = None, criterion: Callable[..., torch.Tensor] = None, iterations: int = 30,
                 training_epochs: int = 5, granularity: str = "fine-grained") -> None:
        check_training_args("ADMMPruner", trainer, traced_optimizer, criterion)
        if granularity not in ("fine-grained", "coarse-grained"):
            raise PruningConfigError(f"ADMMPruner granularity must be 'fine-grained' or 'coarse-grained', got "
                                     f"{granularity!r}.")
        super().__init__(model, self._v2_config(model, config_list, "normal"),  # type: ignore[call-arg]
                         trainer=trainer_without_epoch(trainer), num_iterations=iterations,
                         training_epochs=training_epochs, optimizer=traced_optimizer, criterion=criterion,
                         base_algo="level" if granularity == "fine-grained" else "l1")


class MovementPruner(V2Pruner, MovementEngine):
    """Movement pruning with NNI 2.x's signature, run by slimkit's ``movement`` engine.

    ``MovementPruner(model, config_list, trainer, traced_optimizer, criterion, training_epochs, warm_up_step,
    cool_down_beginning_step)``: weights whose score (learned from ``-weight * grad`` while fine-tuning) is
    lowest are pruned, the sparsity rising between the two steps.
    """

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], trainer: Callable[..., Any] = None,
                 traced_optimizer: Any = None, criterion: Callable[..., torch.Tensor] = None,
                 training_epochs: int = 1, warm_up_step: int = 0, cool_down_beginning_step: int | None = None) -> None:
        check_training_args("MovementPruner", trainer, traced_optimizer, criterion)
        super().__init__(model, self._v2_config(model, config_list, "normal"),  # type: ignore[call-arg]
                         trainer=trainer_without_epoch(trainer), traced_optimizer=traced_optimizer,
                         criterion=criterion, training_epochs=training_epochs, warm_up_step=warm_up_step,
                         cool_down_beginning_step=cool_down_beginning_step)
