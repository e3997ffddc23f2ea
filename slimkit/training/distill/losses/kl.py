"""KLDivergence: Hinton's soft-target loss (Hinton, Vinyals & Dean 2015), with MMRazor's arguments."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from slimkit.core.registry import register_component
from slimkit.training.distill.losses.base import DistillLoss, class_dim, positive, reduce, reduction_of


class KLDivergence(DistillLoss):
    """``tau**2 * KL(softmax(T / tau) || softmax(S / tau))``.

    Logits ``[N, C]``, token logits ``[N, L, C]`` (classes last) or dense logits ``[N, C, H, W]`` (classes on
    dimension 1, e.g. segmentation). ``reduction``: ``"batchmean"`` (default) divides the summed divergence by
    the number of predictions rows -- ``N`` for ``[N, C]`` and ``[N, C, H, W]``, ``N * L`` for token logits --;
    ``"mean"`` by the number of elements, ``"sum"`` sums. ``teacher_detach=False`` lets gradients reach the
    teacher's input (a data-free generator trains through it). The ``tau**2`` factor keeps the gradient scale
    independent of the temperature.
    """

    def __init__(self, tau: float = 1.0, reduction: str = "batchmean", loss_weight: float = 1.0,
                 teacher_detach: bool = True) -> None:
        super().__init__(loss_weight)
        self.tau = positive("KLDivergence", tau, "tau (the temperature)")
        self.reduction = reduction_of("KLDivergence", reduction)
        self.teacher_detach = bool(teacher_detach)

    def forward(self, preds_S: torch.Tensor, preds_T: torch.Tensor) -> torch.Tensor:  # noqa: N803 (MMRazor names)
        """The weighted loss of student logits ``preds_S`` against teacher logits ``preds_T``."""
        teacher = preds_T.detach() if self.teacher_detach else preds_T
        dim = class_dim(preds_S)
        log_s = F.log_softmax(preds_S.float() / self.tau, dim=dim)
        log_t = F.log_softmax(teacher.float() / self.tau, dim=dim)
        values = F.kl_div(log_s, log_t, reduction="none", log_target=True)
        rows = preds_S.shape[0] if preds_S.dim() != 3 else preds_S.shape[0] * preds_S.shape[1]
        return self.loss_weight * self.tau**2 * reduce(values, self.reduction, rows)


register_component(KLDivergence, "loss")
