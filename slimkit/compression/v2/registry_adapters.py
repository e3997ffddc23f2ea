"""NNI 2.x's ``ADMMPruner`` and ``MovementPruner`` as thin adapters over the registry's engines.

The engines are registered as the ``admm`` and ``movement`` algorithms; the adapter looks them up when it is
built (``slimkit.compression`` is always imported after the algorithms have registered), translates NNI 2.x's
arguments into the engine's by name, and gives it NNI 2.x's ``compress() -> (model, masks)``. Every other
attribute is the engine's own.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.compression.pruning.config import PruningConfigError
from slimkit.compression.v2.base import V2Masks, check_training_args, show_pruned_weights, to_v1_masks, v2_masks
from slimkit.compression.v2.config import canonical_config_list
from slimkit.core import registry
from slimkit.errors import AlgorithmNotFoundError

__all__ = ["ADMMPruner", "MovementPruner"]


def _engine(algorithm: str, nni_name: str) -> type:
    try:
        engine = registry.get(algorithm).engine
    except AlgorithmNotFoundError:
        engine = None
    if engine is None:
        raise PruningConfigError(f"{nni_name} runs slimkit's {algorithm!r} pruner, which this installation has not "
                                 f"registered; `slimkit algorithms` lists the pruners it has (e.g. l1_filter, agp).")
    return engine


def trainer_without_epoch(trainer: Callable[..., Any]) -> Callable[..., Any]:
    """The user's NNI 2.x ``trainer(model, optimizer, criterion)`` under slimkit's engine calling convention."""
    def run(model: nn.Module, optimizer: Any, criterion: Any, epoch: int = 0) -> Any:
        return trainer(model, optimizer, criterion)

    return run


class _RegistryPruner:
    """Build the registry engine from NNI 2.x arguments mapped onto its parameter names."""

    algorithm = ""

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], arguments: dict[str, Any]) -> None:
        engine = _engine(self.algorithm, type(self).__name__)
        translated, _ = canonical_config_list(model, config_list, "normal")
        accepted = inspect.signature(engine).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in accepted.values())
        options = {k: v for k, v in arguments.items() if v is not None and (takes_any or k in accepted)}
        self.engine = engine(model, translated, **options)

    def __getattr__(self, name: str) -> Any:
        if name == "engine":
            raise AttributeError(name)
        return getattr(self.engine, name)

    def compress(self) -> tuple[nn.Module, V2Masks]:
        """Run the engine; return the model and the masks ``{layer: {"weight", "bias"}}``."""
        model = self.engine.compress()
        if hasattr(self.engine, "restore_optimizer"):
            self.engine.restore_optimizer()
        return model, v2_masks(self.engine)

    def show_pruned_weights(self, dim: int = 0) -> list[tuple[str, int, int]]:
        """Print how many units each pruned layer keeps."""
        return show_pruned_weights(self.engine, dim)

    def load_masks(self, masks: Mapping[str, Mapping[str, Any]] | str | os.PathLike) -> None:
        """Install masks (NNI 2.x dict, slimkit dict or mask file)."""
        self.engine.apply_masks(to_v1_masks(masks))


class ADMMPruner(_RegistryPruner):
    """ADMM pruning with NNI 2.x's signature, run by slimkit's ``admm`` engine.

    ``ADMMPruner(model, config_list, trainer, traced_optimizer, criterion, iterations, training_epochs,
    granularity="fine-grained")``: ``iterations`` rounds of ``training_epochs`` epochs, each pulling the weights
    towards their sparse projection; ``"fine-grained"`` prunes single weights, ``"coarse-grained"`` filters.
    """

    algorithm = "admm"

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], trainer: Callable[..., Any] = None,
                 traced_optimizer: Any = None, criterion: Callable[..., torch.Tensor] = None, iterations: int = 30,
                 training_epochs: int = 5, granularity: str = "fine-grained") -> None:
        check_training_args("ADMMPruner", trainer, traced_optimizer, criterion)
        if granularity not in ("fine-grained", "coarse-grained"):
            raise PruningConfigError(f"ADMMPruner granularity must be 'fine-grained' or 'coarse-grained', got "
                                     f"{granularity!r}.")
        super().__init__(model, config_list, {
            "trainer": trainer_without_epoch(trainer), "optimizer": traced_optimizer, "criterion": criterion,
            "num_iterations": iterations, "iterations": iterations, "training_epochs": training_epochs,
            "base_algo": "level" if granularity == "fine-grained" else "l1", "granularity": granularity})


class MovementPruner(_RegistryPruner):
    """Movement pruning with NNI 2.x's signature, run by slimkit's ``movement`` engine.

    ``MovementPruner(model, config_list, trainer, traced_optimizer, criterion, training_epochs, warm_up_step,
    cool_down_beginning_step)``: weights whose score (learned from ``-weight * grad`` while fine-tuning) is
    lowest are pruned, the sparsity rising between the two steps.
    """

    algorithm = "movement"

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], trainer: Callable[..., Any] = None,
                 traced_optimizer: Any = None, criterion: Callable[..., torch.Tensor] = None,
                 training_epochs: int = 1, warm_up_step: int = 0, cool_down_beginning_step: int | None = None) -> None:
        check_training_args("MovementPruner", trainer, traced_optimizer, criterion)
        super().__init__(model, config_list, {
            "trainer": trainer_without_epoch(trainer), "optimizer": traced_optimizer, "criterion": criterion,
            "training_epochs": training_epochs, "warm_up_step": warm_up_step,
            "cool_down_beginning_step": cool_down_beginning_step})
