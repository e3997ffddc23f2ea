"""WSLD: weighted soft labels for distillation (Zhou et al., ICLR 2021, arXiv:2102.00650)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError
from slimkit.training.distill.losses.base import DistillLoss, labelled_rows, positive


class WSLD(DistillLoss):
    """Soft-label cross-entropy weighted per sample by how much better the teacher fits the true label.

    Each sample's ``tau``-softened cross-entropy to the teacher is weighted ``1 - exp(-CE_s / CE_t)``, where
    ``CE_s`` and ``CE_t`` are the student's and the teacher's cross-entropies on the ground truth: samples the
    student already fits as well as the teacher weigh less (the bias-variance view of the paper). Scaled by
    ``tau**2``, averaged over the batch. ``num_classes`` is checked against the logits when given (MMRazor's
    default of 1000 is not assumed: the logits say how many classes there are). Forward arguments are
    MMRazor's ``student``, ``teacher``, ``gt_labels``.
    """

    def __init__(self, tau: float = 1.0, loss_weight: float = 1.0, num_classes: int | None = None) -> None:
        super().__init__(loss_weight)
        self.tau = positive("WSLD", tau, "tau (the temperature)")
        self.num_classes = None if num_classes is None else int(positive("WSLD", num_classes, "num_classes"))

    def forward(self, student: torch.Tensor, teacher: torch.Tensor, gt_labels: torch.Tensor) -> torch.Tensor:
        """The weighted WSLD loss."""
        s, t, labels = labelled_rows("WSLD", student, teacher, gt_labels)
        if self.num_classes is not None and s.shape[1] != self.num_classes:
            raise ConfigError(f"WSLD(num_classes={self.num_classes}) got logits with {s.shape[1]} classes; drop "
                              "num_classes (the logits give it) or set it to the model's class count.")
        soft_ce = -(F.softmax(t / self.tau, dim=1) * F.log_softmax(s / self.tau, dim=1)).sum(dim=1)
        ce_s = F.cross_entropy(s.detach(), labels, reduction="none")
        ce_t = F.cross_entropy(t, labels, reduction="none")
        weight = 1.0 - torch.exp(-(ce_s / (ce_t + 1e-7)).clamp(min=0.0))
        return self.loss_weight * self.tau**2 * (weight * soft_ce).mean()


register_component(WSLD, "loss")
