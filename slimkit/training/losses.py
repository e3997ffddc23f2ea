"""Shared training losses: the default loss every slimkit training run uses unless told otherwise.

A *batch loss* is ``loss(model, batch) -> scalar tensor``: it reads the batch itself (with
:func:`slimkit.data.split_batch`), runs the model and scores the output, so a loss that needs more than
``(output, targets)`` (the model's own ``.loss``, a teacher's output for distillation) fits the same slot.
:func:`criterion_loss` turns a torch-style ``criterion(output, targets)`` into one. Distillation losses
(softened-logit KL, feature matching) belong in this module too, next to the default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.data.batches import split_batch
from slimkit.errors import DataError
from slimkit.utils import main_tensor, run_model

#: ``loss(model, batch) -> scalar tensor``; the batch is already on the model's device.
BatchLoss = Callable[[nn.Module, Any], torch.Tensor]
#: ``criterion(output, targets) -> scalar tensor`` (what ``torch.nn.functional.cross_entropy`` is).
Criterion = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: Targets with this value are not scored (padding, prompt tokens), as in PyTorch and Hugging Face.
IGNORE_INDEX = -100

_NEEDS_TARGETS = (
    "Cross-entropy training and data-driven statistics need (inputs, integer labels) batches, as classification "
    "data gives (e.g. cfg.add_data('Digits')), or a model that returns its own .loss when fed the batch (a "
    "Hugging Face model fed labels); or pass your own loss."
)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of class logits ``[B, C]`` (or token logits ``[B, L, V]``) against integer targets.

    Token logits are flattened to ``[B * L, V]`` against ``[B * L]`` targets; dense logits ``[B, C, H, W]``
    (segmentation) against ``[B, H, W]`` targets are scored per pixel with the classes on dimension 1.
    Targets of -100 are ignored. The maths runs in float32 so half-precision models train stably.
    """
    if not isinstance(targets, torch.Tensor) or targets.is_floating_point() or targets.is_complex():
        got = f"{targets.dtype} targets" if isinstance(targets, torch.Tensor) else f"targets of type {type(targets)}"
        raise DataError(f"The default loss is cross-entropy on class indices and got {got}. {_NEEDS_TARGETS}")
    if logits.dim() >= 4 and targets.dim() == logits.dim() - 1 and targets.shape == logits.shape[:1] + logits.shape[2:]:
        return F.cross_entropy(logits.float(), targets.long(), ignore_index=IGNORE_INDEX)
    if logits.dim() > 2:
        logits, targets = logits.flatten(0, -2), targets.flatten()
    if logits.dim() == 2 and targets.shape != logits.shape[:1]:
        raise DataError(
            f"Cross-entropy needs one target per row of the logits: logits {tuple(logits.shape)} (rows = all dims "
            f"but the last), targets {tuple(targets.shape)}; give integer class targets matching the model output."
        )
    return F.cross_entropy(logits.float(), targets.long(), ignore_index=IGNORE_INDEX)


def model_loss(output: Any) -> torch.Tensor | None:
    """The ``loss`` a model put in its output (``output.loss`` or ``output['loss']``), else None."""
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) else None


def default_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    """Cross-entropy of the model's main output against the batch targets, else the model's own ``.loss``.

    The batch is read with :func:`slimkit.data.split_batch` (so a dict batch goes to the model whole, and a
    Hugging Face model fed ``labels`` computes its own loss). Raises :class:`~slimkit.errors.DataError` when
    the batch has no targets and the model returns no loss.
    """
    inputs, targets = split_batch(batch)
    output = run_model(model, inputs)
    if targets is not None:
        return cross_entropy(main_tensor(output), targets)
    loss = model_loss(output)
    if loss is None:
        raise DataError(
            f"The default loss found no targets in a {type(batch).__name__} batch and the model's output has no "
            f".loss. {_NEEDS_TARGETS}"
        )
    return loss


def criterion_loss(criterion: Criterion) -> BatchLoss:
    """A batch loss that scores the model's main output with ``criterion(output, targets)``."""

    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        inputs, targets = split_batch(batch)
        if targets is None:
            raise DataError(
                f"criterion_loss({getattr(criterion, '__name__', 'criterion')}) needs (inputs, targets) batches, got "
                f"a {type(batch).__name__} batch without targets."
            )
        return criterion(main_tensor(run_model(model, inputs)), targets)

    return loss
