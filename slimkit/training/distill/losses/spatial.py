"""Losses on feature maps: channel-wise distillation (CWD) and attention transfer (AT)."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError
from slimkit.training.distill.losses.base import DistillLoss, positive


class ChannelWiseDivergence(DistillLoss):
    """Channel-wise distillation (CWD, Shu et al. 2021) on ``[N, C, H, W]`` feature maps or dense logits.

    Each channel's spatial map becomes a distribution (softmax over ``H*W`` at temperature ``tau``);
    ``tau**2 * KL(teacher || student)`` is summed over positions and averaged over ``N*C``.
    """

    def __init__(self, tau: float = 1.0, loss_weight: float = 1.0) -> None:
        super().__init__(loss_weight)
        self.tau = positive("ChannelWiseDivergence", tau, "tau (the temperature)")

    def forward(self, preds_S: torch.Tensor, preds_T: torch.Tensor) -> torch.Tensor:  # noqa: N803 (MMRazor names)
        """The weighted CWD of student feature map ``preds_S`` against the teacher's ``preds_T``."""
        if preds_S.dim() < 3:
            raise ConfigError(f"ChannelWiseDivergence needs [N, C, H, W] feature maps, got {tuple(preds_S.shape)}.")
        n, c = preds_S.shape[:2]
        s = preds_S.float().reshape(n * c, -1) / self.tau
        t = preds_T.float().reshape(n * c, -1) / self.tau
        kl = F.kl_div(F.log_softmax(s, dim=1), F.log_softmax(t, dim=1), reduction="sum", log_target=True)
        return self.loss_weight * self.tau**2 * kl / (n * c)


class ATLoss(DistillLoss):
    """Attention transfer (Zagoruyko & Komodakis 2017) between feature maps of any channel counts.

    The L2-normalised spatial maps ``mean_c |f|**p`` of student and teacher are compared with a mean squared
    error. Only ``N``, ``H``, ``W`` must agree, so no connector is needed.
    """

    same_shape: ClassVar[bool] = False

    def __init__(self, p: int = 2, loss_weight: float = 1.0) -> None:
        super().__init__(loss_weight)
        self.p = int(positive("ATLoss", p, "p"))

    def _map(self, feature: torch.Tensor) -> torch.Tensor:
        return F.normalize(feature.float().abs().pow(self.p).mean(dim=1).flatten(1), dim=1)

    def forward(self, s_feature: torch.Tensor, t_feature: torch.Tensor) -> torch.Tensor:
        """The weighted attention-map distance; spatial sizes must match."""
        if s_feature.shape[0] != t_feature.shape[0] or s_feature.shape[2:] != t_feature.shape[2:]:
            raise ConfigError(f"ATLoss compares spatial maps: student {tuple(s_feature.shape)} and teacher "
                              f"{tuple(t_feature.shape)} must agree in all but the channel dimension.")
        return self.loss_weight * (self._map(s_feature) - self._map(t_feature)).pow(2).mean()


for _cls in (ChannelWiseDivergence, ATLoss):
    register_component(_cls, "loss")
