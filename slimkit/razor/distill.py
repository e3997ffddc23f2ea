"""SingleTeacherDistill: one frozen teacher, one student (the architecture), a configurable distiller."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError
from slimkit.razor.base import BaseAlgorithm
from slimkit.razor.builder import build_module, register_module
from slimkit.razor.teacher import resolve_teacher
from slimkit.training.distill import ConfigurableDistiller
from slimkit.utils import run_model


@register_module()
class SingleTeacherDistill(BaseAlgorithm):
    """Knowledge distillation from one teacher (MMRazor's ``SingleTeacherDistill``).

    ``architecture``: the student; ``teacher``: a module or config dict; ``distiller``: a
    :class:`~slimkit.training.distill.ConfigurableDistiller` or the dict of its fields (``student_recorders``,
    ``teacher_recorders``, ``distill_losses``, ``loss_forward_mappings``, ``connectors``). The teacher is frozen
    (no gradients unless ``teacher_trainable``) and stays in eval mode whatever ``train()`` is called with, so
    its norm statistics never move. ``mode="loss"`` returns ``student.<name>`` task losses (when
    ``calculate_student_loss``) and ``distill.<name>`` distillation losses. ``teacher_ckpt`` loads the teacher's
    weights from a ``.safetensors`` file or a saved folder (no pickle; names and shapes must match, see
    :mod:`slimkit.razor.teacher`); with ``teacher=None`` a slimkit or Hugging Face save folder is the teacher.
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any],
                 teacher: nn.Module | Mapping[str, Any] | None = None,
                 distiller: ConfigurableDistiller | Mapping[str, Any] | None = None, teacher_trainable: bool = False,
                 calculate_student_loss: bool = True, data_preprocessor: Any = None,
                 teacher_ckpt: str | os.PathLike | None = None) -> None:
        super().__init__(architecture, data_preprocessor)
        built = None if teacher is None else build_module(teacher, "teacher")
        self.teacher = resolve_teacher(built, teacher_ckpt)
        if isinstance(distiller, Mapping):
            distiller = ConfigurableDistiller(**{k: v for k, v in distiller.items() if k != "type"})
        if not isinstance(distiller, ConfigurableDistiller):
            raise ConfigError(f"distiller must be a ConfigurableDistiller or a dict of its fields, got "
                              f"{type(distiller).__name__}.")
        self.distiller = distiller
        self.distiller.prepare(self.architecture, self.teacher)
        self.teacher_trainable = bool(teacher_trainable)
        self.calculate_student_loss = bool(calculate_student_loss)
        if not self.teacher_trainable:
            for p in self.teacher.parameters():
                p.requires_grad_(False)
        self.teacher.eval()

    def train(self, mode: bool = True) -> SingleTeacherDistill:
        """Set the student's (and connectors') mode; the teacher stays in eval mode."""
        super().train(mode)
        self.teacher.eval()
        return self

    def loss(self, inputs: Any, data_samples: Any = None) -> dict[str, torch.Tensor]:
        """``student.*`` task losses and ``distill.*`` distillation losses on one batch."""
        with self.distiller.teacher_recording(), torch.set_grad_enabled(self.teacher_trainable and self.training):
            run_model(self.teacher, inputs)
        losses: dict[str, torch.Tensor] = {}
        with self.distiller.student_recording():
            if self.calculate_student_loss:
                losses.update({f"student.{k}": v for k, v in super().loss(inputs, data_samples).items()})
            else:
                self.tensor(inputs, data_samples)
        losses.update({f"distill.{k}": v for k, v in self.distiller.compute_distill_losses().items()})
        return losses
