"""The distillation objective as a batch loss for :func:`slimkit.training.fit`, and the frozen teacher.

:class:`DistillObjective` runs the teacher (eval mode, no gradients) and the student on the same batch
while their recorders capture, then adds the distiller's losses, an optional soft-logit loss and the task
loss. :func:`frozen_teacher` keeps a teacher in eval mode (its BatchNorm statistics and dropout stay fixed)
for a block and restores its mode afterwards, so a user's model handed in as teacher comes back as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from slimkit.data.batches import split_batch
from slimkit.errors import ConfigError, DataError
from slimkit.training.distill.distiller import ConfigurableDistiller, forward_arguments
from slimkit.training.losses import cross_entropy, model_loss
from slimkit.utils import main_tensor, run_model


@contextlib.contextmanager
def frozen_teacher(teacher: nn.Module) -> Iterator[nn.Module]:
    """Put ``teacher`` in eval mode for the block, then restore its train/eval mode (parameters untouched)."""
    if not isinstance(teacher, nn.Module):
        raise ConfigError(f"The teacher must be a torch.nn.Module, got {type(teacher).__name__}.")
    modes = {m: m.training for m in teacher.modules()}
    teacher.eval()
    try:
        yield teacher
    finally:
        for module, mode in modes.items():
            module.training = mode


class DistillObjective:
    """A batch loss ``objective(student, batch)`` that distils ``teacher`` into the student.

    Total = sum of ``distiller``'s losses (when given) + ``logits_loss(student logits, teacher logits)`` (when
    given, e.g. :class:`~slimkit.training.distill.losses.KLDivergence`; a loss with a third argument, such as
    :class:`~slimkit.training.distill.losses.DKDLoss`, gets the batch's labels) + ``task_weight`` x the task loss
    (cross-entropy on the batch targets, or the model's own ``.loss``; skipped when ``task_weight`` is 0).
    ``last`` holds the named parts of the latest call (``"distill.<loss>"``, ``"distill.logits"``,
    ``"student.task"``) as floats. The teacher runs without gradients; keep it in eval mode with
    :func:`frozen_teacher` around the training.
    """

    def __init__(self, teacher: nn.Module, distiller: ConfigurableDistiller | None = None,
                 logits_loss: nn.Module | None = None, task_weight: float = 0.0) -> None:
        if distiller is None and logits_loss is None and not task_weight:
            raise ConfigError("DistillObjective needs a distiller, a logits_loss or a task_weight > 0.")
        self.teacher, self.distiller, self.logits_loss = teacher, distiller, logits_loss
        self.task_weight = float(task_weight)
        self.last: dict[str, float] = {}

    def parts(self, student: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
        """The named loss terms on ``batch`` (``distill.*`` and ``student.task``)."""
        inputs, targets = split_batch(batch)
        recording = (self.distiller.teacher_recording() if self.distiller is not None else contextlib.nullcontext())
        with torch.no_grad(), recording:
            t_out = run_model(self.teacher, inputs)
        recording = (self.distiller.student_recording() if self.distiller is not None else contextlib.nullcontext())
        with recording as recorders:
            s_out = run_model(student, inputs)
            if recorders is not None:  # recorders of the data samples (ModuleInputs on '' or a loss_module)
                recorders.feed(inputs, targets, s_out, targets)
        parts: dict[str, torch.Tensor] = {}
        if self.distiller is not None:
            parts.update({f"distill.{k}": v for k, v in self.distiller.compute_distill_losses().items()})
        if self.logits_loss is not None:
            args = [main_tensor(s_out), main_tensor(t_out)]
            if len(forward_arguments(self.logits_loss)) == 3:  # DKD, WSLD: the ground-truth labels too
                if targets is None:
                    raise DataError(f"{type(self.logits_loss).__name__} needs the labels of each batch: give "
                                    "(inputs, labels) batches, or pick a loss without labels (KLDivergence, DISTLoss).")
                args.append(targets)
            parts["distill.logits"] = self.logits_loss(*args)
        if self.task_weight:
            if targets is not None:
                task = cross_entropy(main_tensor(s_out), targets)
            else:
                task = model_loss(s_out)
                if task is None:
                    raise DataError("task_weight > 0 needs (inputs, targets) batches or a model that returns .loss; "
                                    "set the task weight to 0 to distil from the teacher alone.")
            parts["student.task"] = self.task_weight * task
        return parts

    def __call__(self, student: nn.Module, batch: Any) -> torch.Tensor:
        """The summed loss (a scalar tensor) for :func:`slimkit.training.fit`."""
        parts = self.parts(student, batch)
        self.last = {k: float(v.detach()) for k, v in parts.items()}
        return torch.stack([v.float() for v in parts.values()]).sum()
