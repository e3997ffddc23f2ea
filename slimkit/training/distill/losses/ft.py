"""FTLoss: factor transfer (Kim, Park & Kwak, NeurIPS 2018, arXiv:1802.04977)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from slimkit.core.registry import register_component
from slimkit.training.distill.losses.base import DistillLoss


class FTLoss(DistillLoss):
    """L1 distance between the L2-normalised *factors* of student and teacher.

    The factors are what the connectors make of the features: the teacher's paraphraser
    (:class:`~slimkit.training.distill.connectors.Paraphraser`, trained first to reconstruct the teacher's
    feature) and the student's translator (:class:`~slimkit.training.distill.connectors.Translator`).
    """

    def forward(self, s_feature: torch.Tensor, t_feature: torch.Tensor) -> torch.Tensor:
        """The weighted mean ``|normalize(s) - normalize(t)|``."""
        s = F.normalize(s_feature.float().flatten(1), dim=1)
        t = F.normalize(t_feature.float().flatten(1), dim=1)
        return self.loss_weight * (s - t).abs().mean()


register_component(FTLoss, "loss")
