"""MGDLoss: masked generative distillation (Yang et al., ECCV 2022, arXiv:2205.01529)."""

from __future__ import annotations

import torch

from slimkit.core.registry import register_component
from slimkit.training.distill.losses.base import DistillLoss, check_pair, positive


class MGDLoss(DistillLoss):
    """Summed squared error between the teacher's feature and the one the student's generator rebuilt.

    The student's feature goes through an :class:`~slimkit.training.distill.connectors.MGDConnector` (random
    spatial mask, then a small generator); the loss is ``alpha_mgd * sum((s - t)**2) / N``.
    """

    def __init__(self, alpha_mgd: float = 2e-5, loss_weight: float = 1.0) -> None:
        super().__init__(loss_weight)
        self.alpha_mgd = positive("MGDLoss", alpha_mgd, "alpha_mgd")

    def forward(self, preds_S: torch.Tensor, preds_T: torch.Tensor) -> torch.Tensor:  # noqa: N803 (MMRazor names)
        """The weighted MGD loss."""
        check_pair("MGDLoss", preds_S, preds_T)
        diff = preds_S.float() - preds_T.float()
        return self.loss_weight * self.alpha_mgd * diff.pow(2).sum() / preds_S.shape[0]


register_component(MGDLoss, "loss")
