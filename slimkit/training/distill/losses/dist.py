"""DISTLoss: knowledge distillation from a stronger teacher by correlation (Huang et al., NeurIPS 2022)."""

from __future__ import annotations

import torch

from slimkit.core.registry import register_component
from slimkit.training.distill.losses.base import DistillLoss, class_dim, finite, positive


def _pearson_distance(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``1 - mean_rows pearson(a[i], b[i])``."""
    a, b = a - a.mean(dim=1, keepdim=True), b - b.mean(dim=1, keepdim=True)
    corr = (a * b).sum(dim=1) / (a.norm(dim=1) * b.norm(dim=1) + eps)
    return 1.0 - corr.mean()


class DISTLoss(DistillLoss):
    """Match the *relations* of the predictions rather than their values.

    Inter-class relation: per sample, the Pearson correlation of the student's and the teacher's class
    probabilities (softmax at ``tau``); intra-class relation: per class, the correlation across the batch. The
    loss is ``tau**2 * (inter_loss_weight * (1 - inter) + intra_loss_weight * (1 - intra))``. Forward arguments
    are MMRazor's ``logits_S`` / ``logits_T``.
    """

    def __init__(self, inter_loss_weight: float = 1.0, intra_loss_weight: float = 1.0, tau: float = 1.0,
                 loss_weight: float = 1.0, teacher_detach: bool = True) -> None:
        super().__init__(loss_weight)
        self.inter_loss_weight = finite("DISTLoss", inter_loss_weight, "inter_loss_weight")
        self.intra_loss_weight = finite("DISTLoss", intra_loss_weight, "intra_loss_weight")
        self.tau = positive("DISTLoss", tau, "tau (the temperature)")
        self.teacher_detach = bool(teacher_detach)

    def forward(self, logits_S: torch.Tensor, logits_T: torch.Tensor) -> torch.Tensor:  # noqa: N803
        """The weighted DIST loss of student logits against teacher logits."""
        teacher = logits_T.detach() if self.teacher_detach else logits_T
        dim = class_dim(logits_S)
        y_s = (logits_S.float().movedim(dim, -1).flatten(0, -2) / self.tau).softmax(dim=1)
        y_t = (teacher.float().movedim(dim, -1).flatten(0, -2) / self.tau).softmax(dim=1)
        inter = _pearson_distance(y_s, y_t)
        intra = _pearson_distance(y_s.t(), y_t.t())
        return self.loss_weight * self.tau**2 * (self.inter_loss_weight * inter + self.intra_loss_weight * intra)


register_component(DISTLoss, "loss")
