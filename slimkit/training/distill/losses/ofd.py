"""OFDLoss: the partial L2 distance of "A Comprehensive Overhaul of Feature Distillation" (Heo et al., ICCV 2019)."""

from __future__ import annotations

import torch

from slimkit.core.registry import register_component
from slimkit.training.distill.losses.base import DistillLoss, check_pair, positive


class OFDLoss(DistillLoss):
    """Squared differences of pre-ReLU features, skipped where the student is already below a negative teacher.

    A position counts when the student exceeds the teacher or the teacher is positive: below zero only the
    sign matters after the ReLU. The teacher's feature reaches the loss through an
    :class:`~slimkit.training.distill.connectors.OFDTeacherConnector` (clipped from below at the margin of its
    batch norm). Summed, divided by the batch size and by ``mul_factor``.
    """

    def __init__(self, loss_weight: float = 1.0, mul_factor: float = 1000.0) -> None:
        super().__init__(loss_weight)
        self.mul_factor = positive("OFDLoss", mul_factor, "mul_factor")

    def forward(self, s_feature: torch.Tensor, t_feature: torch.Tensor) -> torch.Tensor:
        """The weighted partial L2 distance."""
        check_pair("OFDLoss", s_feature, t_feature)
        s, t = s_feature.float(), t_feature.float()
        counted = (s > t) | (t > 0)
        return self.loss_weight * ((s - t).pow(2) * counted).sum() / s.shape[0] / self.mul_factor


register_component(OFDLoss, "loss")
