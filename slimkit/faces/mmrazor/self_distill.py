"""SelfDistill: distillation without a separate teacher (MMRazor's ``SelfDistill``; BYOT, Zhang et al. 2019).

The student's own deepest layers are the teacher: the distiller's "teacher" recorders watch the same model as
its student recorders (the deepest classifier's logits, the pooled feature, the labels its loss module sees),
and shallow classifiers (:class:`~slimkit.training.distill.BYOTConnector`) on earlier stages learn from them.
One forward per step records both sides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.base import BaseAlgorithm, labels_of
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.distill import build_distiller, student_pass
from slimkit.training.distill import ConfigurableDistiller


@register_module()
class SelfDistill(BaseAlgorithm):
    """The architecture distils itself: ``distiller``'s student and teacher recorders both watch ``architecture``.

    ``distiller``: a :class:`~slimkit.training.distill.ConfigurableDistiller` (MMRazor's configs use
    ``BYOTDistiller``, which detaches the teacher side) or its config. ``mode="loss"`` returns ``student.*``
    (the task loss, when ``calculate_student_loss``) and ``distill.*``; ``student_trainable=False`` runs the
    architecture without gradients (only connectors train then).
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any],
                 distiller: ConfigurableDistiller | Mapping[str, Any] | None = None, student_trainable: bool = True,
                 calculate_student_loss: bool = True, data_preprocessor: Any = None,
                 init_cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__(architecture, data_preprocessor, init_cfg)
        if distiller is None:
            raise ConfigError("SelfDistill needs distiller=dict(type='BYOTDistiller', student_recorders=..., "
                              "teacher_recorders=..., distill_losses=..., loss_forward_mappings=...).")
        self.distiller = build_distiller(distiller)
        self.distiller.prepare(self.architecture, self.architecture)
        self.student_trainable, self.calculate_student_loss = bool(student_trainable), bool(calculate_student_loss)
        self.init_weights()

    @property
    def student(self) -> nn.Module:
        """The architecture (MMRazor's alias)."""
        return self.architecture

    def loss(self, inputs: Any, data_samples: Any = None) -> dict[str, torch.Tensor]:
        """``student.*`` task losses and ``distill.*`` losses from one forward of the architecture."""
        labels = labels_of(data_samples)
        with self.distiller.student_recording() as students, self.distiller.teacher_recording() as teachers, \
                torch.set_grad_enabled(self.student_trainable and torch.is_grad_enabled()):
            losses, output = student_pass(self, inputs, data_samples, self.calculate_student_loss)
            students.feed(inputs, data_samples, output, labels)
            teachers.feed(inputs, data_samples, output, labels)
        losses.update({f"distill.{k}": v for k, v in self.distiller.compute_distill_losses().items()})
        return losses
