"""NNI 3.0's ``LightningEvaluator``: a Lightning ``Trainer`` whose loss and optimizer step a compressor patches.

``LightningEvaluator(trainer, data_module, dummy_input=None)``: ``train(max_steps, max_epochs)`` runs
``trainer.fit(model, datamodule=data_module)`` for that long (the trainer is rebuilt with the duration when it
was made with ``slimkit.trace(pl.Trainer)(...)``, as NNI 3.0 asks; a plain trainer has its fit loop's limits set
for the run and restored); the bound ``LightningModule``'s ``training_step`` output goes through the loss patches
and each step of the optimizers its ``configure_optimizers`` returns through the step patches. ``evaluate()`` is
``trainer.validate(model, datamodule=data_module)``: ``(metrics.get("default"), metrics)``. Lightning is an
optional dependency (``pip install slimkit[lightning]``: ``pytorch-lightning``, or ``lightning``); without it the
constructor raises :class:`~slimkit.errors.MissingPackageError` naming the alternative.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError, MissingPackageError
from slimkit.faces.nni.v2.trace import rebuild_call
from slimkit.faces.nni.v3.evaluator import Evaluator, patch_output_loss, undo_patches

__all__ = ["LightningEvaluator", "lightning_module"]


def lightning_module() -> Any:
    """Lightning's ``pytorch`` package (``lightning.pytorch`` or ``pytorch_lightning``), or a clear error."""
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise MissingPackageError("LightningEvaluator needs Lightning (pip install slimkit[lightning], i.e. "
                              "pytorch-lightning; or pip install lightning), which is not installed. Or wrap your "
                              "loop in TorchEvaluator(training_func, optimizers, training_step), which needs nothing "
                              "else.")


def _optimizers_of(configured: Any) -> list[torch.optim.Optimizer]:
    """The torch optimizers in whatever ``configure_optimizers`` returned (one, a list, a dict, a tuple of lists)."""
    if isinstance(configured, torch.optim.Optimizer):
        return [configured]
    if isinstance(configured, Mapping):
        return _optimizers_of(configured.get("optimizer"))
    if isinstance(configured, (list, tuple)):
        return [o for item in configured for o in _optimizers_of(item)]
    return []


class LightningEvaluator(Evaluator):
    """NNI 3.0's evaluator over Lightning: ``LightningEvaluator(trainer, data_module, dummy_input=None)``."""

    def __init__(self, trainer: Any, data_module: Any = None, dummy_input: Any = None) -> None:
        super().__init__(dummy_input)
        pl = lightning_module()
        if not isinstance(trainer, pl.Trainer):
            raise ConfigError(f"LightningEvaluator needs a Lightning Trainer (slimkit.trace(pl.Trainer)(...) or a "
                              f"plain pl.Trainer), got {type(trainer).__name__}.")
        if data_module is not None and not isinstance(data_module, pl.LightningDataModule):
            raise ConfigError(f"LightningEvaluator data_module must be a LightningDataModule, got "
                              f"{type(data_module).__name__}.")
        self.trainer, self.data_module, self._pl = trainer, data_module, pl

    def bind_model(self, model: nn.Module, param_names_map: Mapping[str, str] | None = None) -> None:
        """Bind a ``LightningModule`` (the compressor wraps its layers in place)."""
        if not isinstance(model, self._pl.LightningModule):
            raise ConfigError(f"LightningEvaluator trains a LightningModule, got {type(model).__name__}; compress "
                              "the LightningModule itself (its layers are wrapped in place).")
        super().bind_model(model, param_names_map)

    def _trainer_for(self, max_steps: int | None, max_epochs: int | None) -> tuple[Any, Any]:
        """A trainer for the run and what restores the user's one afterwards."""
        limits = {"max_steps": -1 if max_steps is None else int(max_steps), "max_epochs": max_epochs}
        if max_steps is None and max_epochs is None:
            return self.trainer, None
        rebuilt = rebuild_call(self.trainer, limits)
        if rebuilt is not None:
            return rebuilt, None
        loop = self.trainer.fit_loop
        saved = (loop.epoch_loop.max_steps, loop.max_epochs)
        loop.epoch_loop.max_steps = limits["max_steps"]
        loop.max_epochs = -1 if max_epochs is None else int(max_epochs)

        def restore() -> None:
            loop.epoch_loop.max_steps, loop.max_epochs = saved

        return self.trainer, restore

    def train(self, max_steps: int | None = None, max_epochs: int | None = None) -> None:
        """``trainer.fit`` for ``max_steps`` steps (or ``max_epochs`` epochs) with the patches applied."""
        model = self._require_model()
        own = {name: vars(model).get(name) for name in ("training_step", "configure_optimizers")}
        original_step, original_configure = model.training_step, model.configure_optimizers
        patched: list[tuple[torch.optim.Optimizer, Any, bool]] = []

        def training_step(_model: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
            return patch_output_loss(original_step(batch, *args, **kwargs), batch, self._loss_patches)

        def configure_optimizers(_model: Any) -> Any:
            configured = original_configure()
            optimizers = _optimizers_of(configured)
            if optimizers:
                self._patch_step(optimizers[0], patched)
            return configured

        model.training_step = types.MethodType(training_step, model)
        model.configure_optimizers = types.MethodType(configure_optimizers, model)
        trainer, restore = self._trainer_for(max_steps, max_epochs)
        try:
            trainer.fit(model, datamodule=self.data_module)
        finally:
            if restore is not None:
                restore()
            undo_patches(model, own, patched)

    def evaluate(self) -> Any:
        """``trainer.validate``'s metrics: ``(metrics.get("default"), metrics)`` (``None`` without validation)."""
        model = self._require_model()
        results = self.trainer.validate(model, datamodule=self.data_module, verbose=False)
        if not results:
            return None
        metrics = {k: float(v) for k, v in results[0].items()}
        return metrics.get("default"), metrics
