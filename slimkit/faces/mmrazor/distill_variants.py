"""Two SingleTeacherDistill variants of MMRazor's: FpnTeacherDistill (detectors) and OverhaulFeatureDistillation."""

from __future__ import annotations

from typing import Any

from torch import nn

from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.distill import SingleTeacherDistill
from slimkit.training.distill import OFDDistiller
from slimkit.utils import run_model


@register_module()
class FpnTeacherDistill(SingleTeacherDistill):
    """Distil a detector's (or segmentor's) features: the teacher runs only up to its neck.

    The teacher computes ``teacher.extract_feat(inputs)`` (MMDetection's name) when it has that method, else
    ``teacher.neck(teacher.backbone(inputs))`` when it has both, else its whole forward. The student computes
    its own losses (its ``loss(inputs, data_samples)`` method, as MMEngine models do, or slimkit's task loss).
    Arguments as :class:`SingleTeacherDistill`.
    """

    def teacher_forward(self, inputs: Any) -> Any:
        """The teacher's features (see the class doc)."""
        extract = getattr(self.teacher, "extract_feat", None)
        if callable(extract):
            return extract(inputs)
        backbone, neck = getattr(self.teacher, "backbone", None), getattr(self.teacher, "neck", None)
        if isinstance(backbone, nn.Module) and isinstance(neck, nn.Module):
            return neck(backbone(inputs))
        return run_model(self.teacher, inputs)


@register_module()
class OverhaulFeatureDistillation(SingleTeacherDistill):
    """OFD (Heo et al., ICCV 2019): SingleTeacherDistill with an ``OFDDistiller``.

    The distiller's teacher connectors take their margins from the teacher's batch norms (see
    :class:`~slimkit.training.distill.OFDDistiller`).
    """

    def connect_teacher(self) -> None:
        """Check the distiller is an ``OFDDistiller`` and give its teacher connectors the teacher's margins."""
        if not isinstance(self.distiller, OFDDistiller):
            raise ConfigError(f"OverhaulFeatureDistillation needs distiller=dict(type='OFDDistiller', ...), got "
                              f"{type(self.distiller).__name__}.")
        self.distiller.init_ofd_connectors(self.teacher)
