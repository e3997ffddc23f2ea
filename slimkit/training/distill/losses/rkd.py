"""Relational knowledge distillation (Park et al., CVPR 2019): distance-wise and angle-wise losses."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError
from slimkit.training.distill.losses.base import DistillLoss


def _flat(owner: str, preds_S: torch.Tensor, preds_T: torch.Tensor, l2: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if preds_S.shape[0] != preds_T.shape[0] or preds_S.shape[0] < 2:
        raise ConfigError(f"{owner} relates the samples of a batch: student {tuple(preds_S.shape)} and teacher "
                          f"{tuple(preds_T.shape)} need the same batch size, at least 2.")
    s, t = preds_S.float().flatten(1), preds_T.float().flatten(1)
    return (F.normalize(s, dim=1), F.normalize(t, dim=1)) if l2 else (s, t)


def _distances(x: torch.Tensor) -> torch.Tensor:
    """Pairwise Euclidean distances, divided by their mean over distinct pairs (the diagonal is 0)."""
    square = x.pow(2).sum(dim=1)
    off = ~torch.eye(len(x), dtype=torch.bool, device=x.device)
    d = (square[:, None] + square[None, :] - 2 * x @ x.t()).clamp(min=1e-12).sqrt() * off  # finite gradients
    return d / d[off].mean().clamp(min=1e-12)


def _angles(x: torch.Tensor) -> torch.Tensor:
    """``cos`` of the angle at every sample ``i`` between the directions to samples ``j`` and ``k``."""
    e = F.normalize(x.unsqueeze(0) - x.unsqueeze(1), dim=2)
    return torch.bmm(e, e.transpose(1, 2)).flatten()


class DistanceWiseRKD(DistillLoss):
    """The student's pairwise sample distances should match the teacher's (each scaled by its mean).

    Only the batch size must agree: student and teacher embeddings may have different widths.
    ``with_l2_norm`` L2-normalises each embedding first. Smooth-L1 between the distance matrices.
    """

    same_shape: ClassVar[bool] = False

    def __init__(self, loss_weight: float = 25.0, with_l2_norm: bool = True) -> None:
        super().__init__(loss_weight)
        self.with_l2_norm = bool(with_l2_norm)

    def forward(self, preds_S: torch.Tensor, preds_T: torch.Tensor) -> torch.Tensor:  # noqa: N803 (MMRazor names)
        """The weighted distance-wise RKD loss."""
        s, t = _flat("DistanceWiseRKD", preds_S, preds_T, self.with_l2_norm)
        return self.loss_weight * F.smooth_l1_loss(_distances(s), _distances(t))


class AngleWiseRKD(DistillLoss):
    """The angles the student's samples form in triplets should match the teacher's (smooth-L1 on cosines).

    Memory grows with the cube of the batch size (a batch of 256 holds 16.8M cosines).
    """

    same_shape: ClassVar[bool] = False

    def __init__(self, loss_weight: float = 50.0, with_l2_norm: bool = True) -> None:
        super().__init__(loss_weight)
        self.with_l2_norm = bool(with_l2_norm)

    def forward(self, preds_S: torch.Tensor, preds_T: torch.Tensor) -> torch.Tensor:  # noqa: N803 (MMRazor names)
        """The weighted angle-wise RKD loss."""
        s, t = _flat("AngleWiseRKD", preds_S, preds_T, self.with_l2_norm)
        return self.loss_weight * F.smooth_l1_loss(_angles(s), _angles(t))


for _cls in (DistanceWiseRKD, AngleWiseRKD):
    register_component(_cls, "loss")
