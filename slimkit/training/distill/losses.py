"""Distillation losses (MMRazor's names and forward arguments): ``loss(student_thing, teacher_thing)``.

Every loss is an ``nn.Module`` with a ``loss_weight``; its ``forward`` argument names are what a distiller's
``loss_forward_mappings`` fill (``preds_S``/``preds_T`` for predictions, ``s_feature``/``t_feature`` for
features). ``same_shape`` says whether the two inputs must have equal shapes (else a connector is needed).
All maths runs in float32.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError


def _positive(name: str, value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{name}: {what} must be a number > 0, got {value!r}.")
    return float(value)


class DistillLoss(nn.Module):
    """Base of the distillation losses: holds ``loss_weight``; subclasses implement ``forward``."""

    #: whether the student and teacher tensors must have the same shape (no connector -> a clear error)
    same_shape: ClassVar[bool] = True

    def __init__(self, loss_weight: float = 1.0) -> None:
        super().__init__()
        self.loss_weight = _positive(type(self).__name__, loss_weight, "loss_weight")


class KLDivergence(DistillLoss):
    """Hinton's soft-target loss: ``tau**2 * KL(softmax(T / tau) || softmax(S / tau))``, batch-mean.

    Logits ``[N, C]`` or token logits ``[N, L, C]`` (flattened to rows). The ``tau**2`` factor keeps the
    gradient scale independent of the temperature.
    """

    def __init__(self, tau: float = 1.0, loss_weight: float = 1.0) -> None:
        super().__init__(loss_weight)
        self.tau = _positive("KLDivergence", tau, "tau (the temperature)")

    def forward(self, preds_S: torch.Tensor, preds_T: torch.Tensor) -> torch.Tensor:  # noqa: N803 (MMRazor names)
        """The weighted loss of student logits ``preds_S`` against teacher logits ``preds_T``."""
        s = preds_S.float().flatten(0, -2) / self.tau
        t = preds_T.detach().float().flatten(0, -2) / self.tau
        kl = F.kl_div(F.log_softmax(s, dim=-1), F.log_softmax(t, dim=-1), reduction="batchmean", log_target=True)
        return self.loss_weight * self.tau**2 * kl


class MSELoss(DistillLoss):
    """Mean squared error between student and teacher features (FitNets-style hint loss)."""

    def forward(self, s_feature: torch.Tensor, t_feature: torch.Tensor) -> torch.Tensor:
        """The weighted mean of ``(s_feature - t_feature) ** 2``."""
        return self.loss_weight * F.mse_loss(s_feature.float(), t_feature.detach().float())


class L2Loss(DistillLoss):
    """Squared L2 distance of features, summed per sample and averaged over the batch.

    ``normalize`` first L2-normalises each sample's flattened feature.
    """

    def __init__(self, normalize: bool = False, loss_weight: float = 1.0) -> None:
        super().__init__(loss_weight)
        self.normalize = bool(normalize)

    def forward(self, s_feature: torch.Tensor, t_feature: torch.Tensor) -> torch.Tensor:
        """The weighted batch mean of ``||s - t||**2``."""
        s, t = s_feature.float().flatten(1), t_feature.detach().float().flatten(1)
        if self.normalize:
            s, t = F.normalize(s, dim=1), F.normalize(t, dim=1)
        return self.loss_weight * (s - t).pow(2).sum(dim=1).mean()


class ChannelWiseDivergence(DistillLoss):
    """Channel-wise distillation (CWD, Shu et al. 2021) on ``[N, C, H, W]`` feature maps.

    Each channel's spatial map becomes a distribution (softmax over ``H*W`` at temperature ``tau``);
    ``tau**2 * KL(teacher || student)`` is summed over positions and averaged over ``N*C``.
    """

    def __init__(self, tau: float = 1.0, loss_weight: float = 1.0) -> None:
        super().__init__(loss_weight)
        self.tau = _positive("ChannelWiseDivergence", tau, "tau (the temperature)")

    def forward(self, preds_S: torch.Tensor, preds_T: torch.Tensor) -> torch.Tensor:  # noqa: N803 (MMRazor names)
        """The weighted CWD of student feature map ``preds_S`` against the teacher's ``preds_T``."""
        if preds_S.dim() < 3:
            raise ConfigError(f"ChannelWiseDivergence needs [N, C, H, W] feature maps, got {tuple(preds_S.shape)}.")
        n, c = preds_S.shape[:2]
        s = preds_S.float().reshape(n * c, -1) / self.tau
        t = preds_T.detach().float().reshape(n * c, -1) / self.tau
        kl = (F.softmax(t, dim=1) * (F.log_softmax(t, dim=1) - F.log_softmax(s, dim=1))).sum()
        return self.loss_weight * self.tau**2 * kl / (n * c)


class ATLoss(DistillLoss):
    """Attention transfer (Zagoruyko & Komodakis 2017) between feature maps of any channel counts.

    The L2-normalised spatial maps ``mean_c |f|**p`` of student and teacher are compared with a mean squared
    error. Only ``N``, ``H``, ``W`` must agree, so no connector is needed.
    """

    same_shape: ClassVar[bool] = False

    def __init__(self, p: int = 2, loss_weight: float = 1.0) -> None:
        super().__init__(loss_weight)
        self.p = int(_positive("ATLoss", p, "p"))

    def _map(self, feature: torch.Tensor) -> torch.Tensor:
        return F.normalize(feature.float().abs().pow(self.p).mean(dim=1).flatten(1), dim=1)

    def forward(self, s_feature: torch.Tensor, t_feature: torch.Tensor) -> torch.Tensor:
        """The weighted attention-map distance; spatial sizes must match."""
        if s_feature.shape[0] != t_feature.shape[0] or s_feature.shape[2:] != t_feature.shape[2:]:
            raise ConfigError(f"ATLoss compares spatial maps: student {tuple(s_feature.shape)} and teacher "
                              f"{tuple(t_feature.shape)} must agree in all but the channel dimension.")
        return self.loss_weight * (self._map(s_feature) - self._map(t_feature.detach())).pow(2).mean()


class CosineSimilarityLoss(DistillLoss):
    """``1 - cos(student, teacher)`` over the last dimension, averaged (embeddings, hidden states)."""

    def forward(self, s_feature: torch.Tensor, t_feature: torch.Tensor) -> torch.Tensor:
        """The weighted mean cosine distance."""
        cos = F.cosine_similarity(s_feature.float(), t_feature.detach().float(), dim=-1)
        return self.loss_weight * (1.0 - cos).mean()


LOSSES: tuple[type[DistillLoss], ...] = (KLDivergence, MSELoss, L2Loss, ChannelWiseDivergence, ATLoss,
                                         CosineSimilarityLoss)
for _cls in LOSSES:
    register_component(_cls, "loss")
