"""PKDLoss: distillation by Pearson correlation of feature maps (Cao et al., NeurIPS 2022, arXiv:2207.02039)."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError
from slimkit.training.distill.losses.base import DistillLoss


def _standardize(feature: torch.Tensor) -> torch.Tensor:
    """Each channel scaled to mean 0, standard deviation 1 over the batch and positions."""
    n, c, h, w = feature.shape
    flat = feature.transpose(0, 1).reshape(c, -1)
    flat = (flat - flat.mean(dim=1, keepdim=True)) / (flat.std(dim=1, keepdim=True) + 1e-6)
    return flat.reshape(c, n, h, w).transpose(0, 1)


class PKDLoss(DistillLoss):
    """Half the MSE of standardised feature maps: 1 - their Pearson correlation, per channel.

    Takes one map or a tuple of maps (FPN levels; each pair summed). Maps of different spatial sizes are
    resized bilinearly: the student's to the teacher's (``resize_stu``) or the other way. Channels must agree.
    """

    same_shape: ClassVar[bool] = False

    def __init__(self, loss_weight: float = 1.0, resize_stu: bool = True) -> None:
        super().__init__(loss_weight)
        self.resize_stu = bool(resize_stu)

    def forward(self, preds_S: torch.Tensor | tuple[torch.Tensor, ...],  # noqa: N803 (MMRazor names)
                preds_T: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The weighted PKD loss (summed over levels)."""
        pairs = [(preds_S, preds_T)] if isinstance(preds_S, torch.Tensor) else list(zip(preds_S, preds_T, strict=True))
        total = torch.zeros((), device=pairs[0][0].device)
        for s, t in pairs:
            s, t = s.float(), t.float()
            if s.dim() != 4 or t.dim() != 4 or s.shape[:2] != t.shape[:2]:
                raise ConfigError(f"PKDLoss needs [N, C, H, W] maps with equal N and C, got {tuple(s.shape)} and "
                                  f"{tuple(t.shape)}; add a connector to match the channels.")
            if s.shape[2:] != t.shape[2:]:
                if self.resize_stu:
                    s = F.interpolate(s, t.shape[2:], mode="bilinear", align_corners=False)
                else:
                    t = F.interpolate(t, s.shape[2:], mode="bilinear", align_corners=False)
            total = total + F.mse_loss(_standardize(s), _standardize(t)) / 2
        return self.loss_weight * total


register_component(PKDLoss, "loss")
