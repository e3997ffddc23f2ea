"""NNI 3.0's ``TransformersEvaluator``: a ``transformers.Trainer`` whose loss and optimizer step a pruner patches.

``TransformersEvaluator(trainer, dummy_input=None)``; the pruner binds the trainer's own model (slimkit wraps
its layers in place), ``train(max_steps)`` runs ``trainer.train()`` for that many steps with the patched
``compute_loss`` and the patched step of the optimizer the trainer creates (or was given).
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

from torch import nn

from slimkit.errors import ConfigError, MissingPackageError
from slimkit.faces.nni.v3.evaluator import Evaluator, patch_output_loss, undo_patches

__all__ = ["TransformersEvaluator"]


class TransformersEvaluator(Evaluator):
    """NNI 3.0's evaluator over a Hugging Face ``transformers.Trainer`` (plain or ``slimkit.trace``-d).

    The trainer's ``args`` (batch size, learning rate, data) are used as they are; only the duration changes
    when a pruner trains (``max_steps`` / ``num_train_epochs`` are restored afterwards).
    """

    def __init__(self, trainer: Any, dummy_input: Any = None) -> None:
        super().__init__(dummy_input)
        try:
            from transformers import Trainer
        except ImportError as exc:  # pragma: no cover - transformers is a dev dependency
            raise MissingPackageError("TransformersEvaluator needs transformers (pip install transformers).") from exc
        if not isinstance(trainer, Trainer):
            raise ConfigError(f"TransformersEvaluator needs a transformers.Trainer, got {type(trainer).__name__}.")
        self.trainer = trainer

    def bind_model(self, model: nn.Module, param_names_map: Mapping[str, str] | None = None) -> None:
        """Bind the trainer's own model (the pruner wraps its layers in place)."""
        if model is not self.trainer.model:
            raise ConfigError("TransformersEvaluator trains trainer.model; prune that same model object.")
        super().bind_model(model, param_names_map)

    def train(self, max_steps: int | None = None, max_epochs: int | None = None) -> None:
        """``trainer.train()`` for ``max_steps`` steps (or ``max_epochs`` epochs) with the patches applied."""
        self._require_model()
        trainer, args = self.trainer, self.trainer.args
        saved = (args.max_steps, args.num_train_epochs)
        own = {name: vars(trainer).get(name) for name in ("compute_loss", "create_optimizer")}
        patched_optimizers: list[tuple[Any, Any, bool]] = []
        original_loss, original_create = trainer.compute_loss, trainer.create_optimizer
        patches = self._loss_patches

        def compute_loss(_trainer: Any, model: nn.Module, inputs: Any, return_outputs: bool = False,
                         **kwargs: Any) -> Any:
            out = original_loss(model, inputs, return_outputs=return_outputs, **kwargs)
            if return_outputs:
                return patch_output_loss(out[0], inputs, patches), out[1]
            return patch_output_loss(out, inputs, patches)

        def create_optimizer(_trainer: Any, *a: Any, **k: Any) -> Any:
            optimizer = original_create(*a, **k)
            if not any(o is optimizer for o, _, _ in patched_optimizers):
                self._patch_step(optimizer, patched_optimizers)
            return optimizer

        trainer.compute_loss = types.MethodType(compute_loss, trainer)
        trainer.create_optimizer = types.MethodType(create_optimizer, trainer)
        try:
            if max_steps is not None:
                args.max_steps = int(max_steps)
            elif max_epochs is not None:
                args.max_steps, args.num_train_epochs = -1, float(max_epochs)
            trainer.train()
        finally:
            args.max_steps, args.num_train_epochs = saved
            undo_patches(trainer, own, patched_optimizers)

    def evaluate(self) -> Any:
        """``trainer.evaluate()``: ``(metrics.get("default"), metrics)``, as NNI 3.0 returns a dict metric."""
        self._require_model()
        metrics = self.trainer.evaluate()
        return metrics.get("default"), metrics
