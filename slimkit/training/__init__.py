"""The one training loop, batch splitting and shared losses.

:func:`fit` fine-tunes a model (the data-driven pruners, the training-aware quantizers and distillation all
go through it) and returns a :class:`FitResult`; :func:`split_batch` (from :mod:`slimkit.data`) reads a
batch as ``(inputs, targets)``; :func:`default_loss` is the cross-entropy / model ``.loss`` default.
"""

from slimkit.data.batches import LABEL_KEYS, move_batch, split_batch
from slimkit.training.loop import EpochCallback, EvalFn, StepCallback, fit
from slimkit.training.losses import BatchLoss, Criterion, criterion_loss, cross_entropy, default_loss, model_loss
from slimkit.training.optim import OPTIMIZERS, make_optimizer
from slimkit.training.result import MODES, EarlyStopping, FitResult

__all__ = [
    "BatchLoss",
    "Criterion",
    "EarlyStopping",
    "EpochCallback",
    "EvalFn",
    "FitResult",
    "LABEL_KEYS",
    "MODES",
    "OPTIMIZERS",
    "StepCallback",
    "criterion_loss",
    "cross_entropy",
    "default_loss",
    "fit",
    "make_optimizer",
    "model_loss",
    "move_batch",
    "split_batch",
]
