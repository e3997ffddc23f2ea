"""SingleTeacherDistill: one frozen teacher, one student (the architecture), a configurable distiller."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import build_component
from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.base import BaseAlgorithm, labels_of
from slimkit.faces.mmrazor.builder import build_module, register_module
from slimkit.faces.mmrazor.teacher import resolve_teacher
from slimkit.training.distill import ConfigurableDistiller
from slimkit.utils import run_model


def build_distiller(spec: Any, what: str = "distiller") -> ConfigurableDistiller:
    """A :class:`ConfigurableDistiller` (or subclass) from itself or its config (``type`` defaults to it)."""
    if isinstance(spec, Mapping):
        spec = build_component({"type": "ConfigurableDistiller", **spec})
    if not isinstance(spec, ConfigurableDistiller):
        raise ConfigError(f"{what} must be a ConfigurableDistiller or a dict of its fields, got {type(spec).__name__}.")
    return spec


def student_pass(algo: BaseAlgorithm, inputs: Any, data_samples: Any,
                 with_loss: bool) -> tuple[dict[str, torch.Tensor], Any]:
    """``({"student.<name>": loss}, output)`` of the architecture (only its output without ``with_loss``)."""
    if not with_loss:
        return {}, algo.tensor(inputs, data_samples)
    student, output = algo.student_loss(inputs, data_samples)
    return {f"student.{k}": v for k, v in student.items()}, output


@register_module()
class SingleTeacherDistill(BaseAlgorithm):
    """Knowledge distillation from one teacher (MMRazor's ``SingleTeacherDistill``).

    ``architecture``: the student; ``teacher``: a module or config dict; ``distiller``: a
    :class:`~slimkit.training.distill.ConfigurableDistiller` or its config (``type`` optional:
    ``student_recorders``, ``teacher_recorders``, ``distill_losses``, ``loss_forward_mappings``,
    ``connectors``). The teacher is frozen (no gradients unless ``teacher_trainable``) and its norm layers stay
    in eval mode whatever ``train()`` is called with (``teacher_norm_eval``), so its statistics never move;
    ``student_trainable=False`` freezes the student too (only connectors train). ``mode="loss"`` returns
    ``student.<name>`` task losses (when ``calculate_student_loss``) and ``distill.<name>`` distillation losses.
    ``teacher_ckpt`` loads the teacher's weights from a ``.safetensors`` file or a saved folder (no pickle;
    names and shapes must match, see :mod:`slimkit.faces.mmrazor.teacher`); with ``teacher=None`` a slimkit or Hugging
    Face save folder is the teacher. Recorders that read the data samples get them as MMEngine would pass them
    (see :class:`~slimkit.training.distill.ModuleInputsRecorder`).
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any],
                 teacher: nn.Module | Mapping[str, Any] | None = None,
                 distiller: ConfigurableDistiller | Mapping[str, Any] | None = None, teacher_trainable: bool = False,
                 calculate_student_loss: bool = True, data_preprocessor: Any = None,
                 teacher_ckpt: str | os.PathLike | None = None, teacher_norm_eval: bool = True,
                 student_trainable: bool = True, init_cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__(architecture, data_preprocessor, init_cfg)
        built = None if teacher is None else build_module(teacher, "teacher")
        self.teacher = resolve_teacher(built, teacher_ckpt)
        self.distiller = build_distiller(distiller)
        self.distiller.prepare(self.architecture, self.teacher)
        self.teacher_trainable, self.teacher_norm_eval = bool(teacher_trainable), bool(teacher_norm_eval)
        self.calculate_student_loss = bool(calculate_student_loss)
        if not self.teacher_trainable:
            for p in self.teacher.parameters():
                p.requires_grad_(False)
        if not student_trainable:
            for p in self.architecture.parameters():
                p.requires_grad_(False)
        self.teacher.eval()
        self.init_weights()
        self.connect_teacher()

    def connect_teacher(self) -> None:
        """Run last in ``__init__``, the teacher's weights in place (OFD reads its connectors' margins from them)."""

    def train(self, mode: bool = True) -> SingleTeacherDistill:
        """Set the student's (and connectors') mode.

        The teacher stays in eval mode, unless ``teacher_norm_eval=False`` and the teacher trains.
        """
        super().train(mode)
        self.teacher.train(mode and self.teacher_trainable and not self.teacher_norm_eval)
        return self

    def teacher_forward(self, inputs: Any) -> Any:
        """Run the teacher on ``inputs`` (subclasses may run part of it)."""
        return run_model(self.teacher, inputs)

    def loss(self, inputs: Any, data_samples: Any = None) -> dict[str, torch.Tensor]:
        """``student.*`` task losses and ``distill.*`` distillation losses on one batch."""
        labels = labels_of(data_samples)
        with self.distiller.teacher_recording() as recorders, torch.set_grad_enabled(
                self.teacher_trainable and self.training):
            output = self.teacher_forward(inputs)
            recorders.feed(inputs, data_samples, output, labels)
        with self.distiller.student_recording() as recorders:
            losses, output = student_pass(self, inputs, data_samples, self.calculate_student_loss)
            recorders.feed(inputs, data_samples, output, labels)
        losses.update({f"distill.{k}": v for k, v in self.distiller.compute_distill_losses().items()})
        return losses
