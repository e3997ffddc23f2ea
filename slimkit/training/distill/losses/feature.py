"""Feature-matching losses: MSE (FitNets' hint), MMRazor's L2Loss, L1Loss and a cosine distance."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from slimkit.core.registry import register_component
from slimkit.training.distill.losses.base import DistillLoss, positive, reduce, reduction_of


class MSELoss(DistillLoss):
    """Mean squared error between student and teacher features (FitNets-style hint loss)."""

    def forward(self, s_feature: torch.Tensor, t_feature: torch.Tensor) -> torch.Tensor:
        """The weighted mean of ``(s_feature - t_feature) ** 2``."""
        return self.loss_weight * F.mse_loss(s_feature.float(), t_feature.float())


class L2Loss(DistillLoss):
    """Squared L2 distance of features (MMRazor's ``L2Loss``, FitNets' hint loss in its configs).

    ``normalize`` (default, as in MMRazor) first L2-normalises each sample's flattened feature and scales it
    by ``mult``. The summed squared difference is divided by the batch size, or by the number of elements
    with ``div_element``; ``dist`` takes its square root instead (a Euclidean distance).
    """

    def __init__(self, loss_weight: float = 1.0, normalize: bool = True, mult: float = 1.0,
                 div_element: bool = False, dist: bool = False) -> None:
        super().__init__(loss_weight)
        self.normalize, self.div_element, self.dist = bool(normalize), bool(div_element), bool(dist)
        self.mult = positive("L2Loss", mult, "mult")

    def forward(self, s_feature: torch.Tensor, t_feature: torch.Tensor) -> torch.Tensor:
        """The weighted ``sum((s - t)**2)`` per sample (or per element, or its square root)."""
        s, t = s_feature.float().flatten(1), t_feature.float().flatten(1)
        if self.normalize:
            s, t = F.normalize(s, dim=1) * self.mult, F.normalize(t, dim=1) * self.mult
        total = (s - t).pow(2).sum()
        if self.dist:
            return self.loss_weight * total.sqrt()
        return self.loss_weight * total / (s.numel() if self.div_element else s.shape[0])


class L1Loss(DistillLoss):
    """Absolute difference of student and teacher outputs (DFAD's loss), reduced by ``reduction``."""

    def __init__(self, loss_weight: float = 1.0, reduction: str = "mean") -> None:
        super().__init__(loss_weight)
        self.reduction = reduction_of("L1Loss", reduction)

    def forward(self, s_feature: torch.Tensor, t_feature: torch.Tensor) -> torch.Tensor:
        """The weighted ``|s - t|`` (teacher not detached: a data-free generator trains through it)."""
        values = (s_feature.float() - t_feature.float()).abs()
        return self.loss_weight * reduce(values, self.reduction, s_feature.shape[0])


class CosineSimilarityLoss(DistillLoss):
    """``1 - cos(student, teacher)`` over the last dimension, averaged (embeddings, hidden states)."""

    def forward(self, s_feature: torch.Tensor, t_feature: torch.Tensor) -> torch.Tensor:
        """The weighted mean cosine distance."""
        cos = F.cosine_similarity(s_feature.float(), t_feature.float(), dim=-1)
        return self.loss_weight * (1.0 - cos).mean()


for _cls in (MSELoss, L2Loss, L1Loss, CosineSimilarityLoss):
    register_component(_cls, "loss")
