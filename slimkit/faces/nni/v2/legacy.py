"""NNI 2.0-2.5's pruner calls (its ``basic_pruners_torch.py``), read by the NNI 2.x classes of this face.

Before NNI 2.6 the pruners that train took ``(model, config_list, optimizer, trainer, criterion, ...)`` with
``sparsifying_training_epochs`` (Slim) and ``sparsifying_training_batches`` (Taylor, APoZ, mean activation:
slimkit's engines take that name too), and ``AGPPruner(model, config_list, optimizer, trainer, criterion,
num_iterations=10, epochs_per_iteration=1, pruning_algorithm="level")`` ran the training itself in
``compress()``. :func:`legacy_slim_arguments` turns such a ``SlimPruner`` call into NNI 2.x's;
:class:`LegacyAGP` is what an ``AGPPruner`` built that way runs (slimkit's AGP engine, stepped per epoch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.agp import AGPEngine
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.faces.nni.v2.base import call_trainer, check_training_args

__all__ = ["LegacyAGP", "is_legacy_agp_call", "is_optimizer", "legacy_agp", "legacy_slim_arguments"]


def is_optimizer(value: Any) -> bool:
    """Whether ``value`` is an optimizer (NNI 2.0-2.5 passes it before the trainer)."""
    return isinstance(value, torch.optim.Optimizer) or (
        callable(getattr(value, "step", None)) and hasattr(value, "param_groups"))


def legacy_slim_arguments(trainer: Any, traced_optimizer: Any, training_epochs: Any,
                          kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``(trainer, traced_optimizer, training_epochs)`` of a ``SlimPruner`` call, NNI 2.0-2.5's form read too.

    Pops NNI 2.0-2.5's ``optimizer``, ``sparsifying_training_epochs``, ``dependency_aware`` and ``dummy_input``
    from ``kwargs``.
    """
    if is_optimizer(trainer) and callable(traced_optimizer) and not is_optimizer(traced_optimizer):
        trainer, traced_optimizer = traced_optimizer, trainer  # (model, config_list, optimizer, trainer, ...)
    if "optimizer" in kwargs:
        if traced_optimizer is not None:
            raise PruningConfigError("SlimPruner got an optimizer twice (traced_optimizer= and optimizer=).")
        traced_optimizer = kwargs.pop("optimizer")
    if "sparsifying_training_epochs" in kwargs:
        training_epochs = kwargs.pop("sparsifying_training_epochs")
    if kwargs.pop("dependency_aware", False):
        raise PruningConfigError("SlimPruner(dependency_aware=True) is not supported: Slim prunes BatchNorm channels "
                                 "ranked together; speed the model up with ModelSpeedup, which follows them.")
    kwargs.pop("dummy_input", None)
    return trainer, traced_optimizer, training_epochs


def is_legacy_agp_call(pruning_algorithm: Any, kwargs: Mapping[str, Any]) -> bool:
    """Whether an ``AGPPruner`` call is NNI 2.0-2.5's (an optimizer third, or ``trainer=`` / ``optimizer=``)."""
    return is_optimizer(pruning_algorithm) or "trainer" in kwargs or "optimizer" in kwargs


class LegacyAGP:
    """NNI 2.0-2.5's ``AGPPruner``: ``compress()`` trains ``num_iterations * epochs_per_iteration`` epochs.

    Each iteration ``t`` (every ``epochs_per_iteration`` epochs) the AGP engine moves the masks to
    ``s_f + (s_i - s_f)(1 - t / (n - 1))^3``, so the last iteration trains at the final sparsity; the user's
    ``trainer(model, optimizer, criterion, epoch)`` runs each epoch (the masks are re-applied after every
    optimizer step).
    """

    def __init__(self, model: nn.Module, config_list: Any, optimizer: Any, trainer: Callable[..., Any],
                 criterion: Callable[..., torch.Tensor], num_iterations: int = 10, epochs_per_iteration: int = 1,
                 pruning_algorithm: str = "level") -> None:
        check_training_args("AGPPruner", trainer, optimizer, criterion)
        # the last of the num_iterations pruning iterations reaches the final sparsity (NNI's epoch span)
        self.engine = AGPEngine(model, config_list, optimizer, pruning_algorithm,
                                num_iterations=max(num_iterations - 1, 1), frequency=epochs_per_iteration,
                                schedule="epoch")
        self.trainer, self.optimizer, self.criterion = trainer, optimizer, criterion
        self.epochs = num_iterations * epochs_per_iteration

    def compress(self) -> nn.Module:
        """Train with the AGP schedule; return the (wrapped) model."""
        model = self.engine.compress()
        for epoch in range(self.epochs):
            self.engine.update_epoch(epoch)
            call_trainer(self.trainer, model, self.optimizer, self.criterion, epoch)
        return model


def legacy_agp(model: nn.Module, config_list: Any, slots: tuple[Any, Any, Any], kwargs: Mapping[str, Any]) -> LegacyAGP:
    """The :class:`LegacyAGP` of an NNI 2.0-2.5 ``AGPPruner`` call.

    ``slots`` are the values in NNI 2.x's third to fifth places (``pruning_algorithm``, ``total_iteration``,
    ``log_dir``), which hold ``(optimizer, trainer, criterion)`` when they were passed by position.
    """
    given = dict(kwargs)
    if is_optimizer(slots[0]):  # (model, config_list, optimizer, trainer, criterion, ...)
        given.update(zip(("optimizer", "trainer", "criterion"), slots, strict=True))
    elif slots[0] is not None:
        given["pruning_algorithm"] = slots[0]
    unknown = sorted(set(given) - {"optimizer", "trainer", "criterion", "num_iterations", "epochs_per_iteration",
                                   "pruning_algorithm"})
    if unknown:
        raise PruningConfigError(f"AGPPruner got unexpected argument(s) {', '.join(unknown)} in NNI 2.0-2.5's form "
                                 "AGPPruner(model, config_list, optimizer, trainer, criterion, num_iterations, "
                                 "epochs_per_iteration, pruning_algorithm).")
    return LegacyAGP(model, config_list, **given)
