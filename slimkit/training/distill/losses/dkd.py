"""DKDLoss: Decoupled Knowledge Distillation (Zhao et al., CVPR 2022, arXiv:2203.08679)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from slimkit.core.registry import register_component
from slimkit.training.distill.losses.base import DistillLoss, finite, labelled_rows, positive, reduce, reduction_of

_MASKED = -1e4  # a logit whose softmax weight is exactly 0 in float32


class DKDLoss(DistillLoss):
    """KD split into target-class (TCKD) and non-target-class (NCKD) terms, weighted ``alpha`` and ``beta``.

    TCKD is the KL divergence between the teacher's and the student's binary distributions
    ``[p(target), 1 - p(target)]``; NCKD the KL divergence between their distributions over the non-target
    classes alone (renormalised). Both at temperature ``tau`` and scaled by ``tau**2``; ``reduction`` as in
    :class:`~slimkit.training.distill.KLDivergence` (each term by its own element count for ``"mean"``).
    ``gt_labels``: one class index per prediction (rows labelled -100 are left out).
    """

    def __init__(self, tau: float = 1.0, alpha: float = 1.0, beta: float = 1.0, reduction: str = "batchmean",
                 loss_weight: float = 1.0) -> None:
        super().__init__(loss_weight)
        self.tau = positive("DKDLoss", tau, "tau (the temperature)")
        self.alpha, self.beta = finite("DKDLoss", alpha, "alpha"), finite("DKDLoss", beta, "beta")
        self.reduction = reduction_of("DKDLoss", reduction)

    def forward(self, preds_S: torch.Tensor, preds_T: torch.Tensor,  # noqa: N803 (MMRazor names)
                gt_labels: torch.Tensor) -> torch.Tensor:
        """The weighted ``alpha * TCKD + beta * NCKD``."""
        s, t, labels = labelled_rows("DKDLoss", preds_S, preds_T, gt_labels)
        s, t = s / self.tau, t / self.tau
        target = F.one_hot(labels, s.shape[1]).bool()
        log_s, log_t = F.log_softmax(s, dim=1), F.log_softmax(t, dim=1)

        def binary(log_p: torch.Tensor) -> torch.Tensor:  # log [p_target, 1 - p_target]
            other = torch.logsumexp(log_p.masked_fill(target, float("-inf")), dim=1, keepdim=True)
            return torch.cat([log_p.gather(1, labels[:, None]), other], dim=1)

        tckd = F.kl_div(binary(log_s), binary(log_t), reduction="none", log_target=True)
        nckd = F.kl_div(F.log_softmax(s.masked_fill(target, _MASKED), dim=1),
                        F.log_softmax(t.masked_fill(target, _MASKED), dim=1), reduction="none", log_target=True)
        rows = s.shape[0]
        loss = self.alpha * reduce(tckd, self.reduction, rows) + self.beta * reduce(nckd, self.reduction, rows)
        return self.loss_weight * self.tau**2 * loss


register_component(DKDLoss, "loss")
