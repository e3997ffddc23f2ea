"""FBKDLoss: feature-based distillation for detectors (Zhang & Ma, ICLR 2021).

"Improve Object Detection with Feature-based Knowledge Distillation: Towards Accurate and Efficient Detectors".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError
from slimkit.training.distill.losses.base import DistillLoss, finite


def _parts(owner: str, value: Any, count: int, side: str) -> Sequence[torch.Tensor]:
    if not isinstance(value, (tuple, list)) or len(value) != count:
        raise ConfigError(f"{owner} takes the {count} outputs of the FBKD{side}Connector as its {side.lower()} "
                          f"input, got {type(value).__name__}; map it through that connector.")
    return value


class FBKDLoss(DistillLoss):
    """Attention-guided feature distance plus attention and non-local relation terms.

    ``s_input``: the outputs of an ``FBKDStudentConnector``; ``t_input``: those of an ``FBKDTeacherConnector``.
    Terms: the L2 distance of the features where the (averaged, detached) spatial and channel attention of both
    networks is high (``mask_l2_weight``); the distances of the channel descriptors (``channel_weight``) and of
    the spatial descriptors (``spatial_weight``); and of the non-local relation features (``nonlocal_weight``;
    MMRazor's spelling ``nonloacl_weight`` is accepted too).
    """

    same_shape: ClassVar[bool] = False

    def __init__(self, mask_l2_weight: float = 7e-5, channel_weight: float = 4e-3, spatial_weight: float = 4e-3,
                 nonlocal_weight: float = 7e-5, loss_weight: float = 1.0, nonloacl_weight: float | None = None) -> None:
        super().__init__(loss_weight)
        self.mask_l2_weight = finite("FBKDLoss", mask_l2_weight, "mask_l2_weight")
        self.channel_weight = finite("FBKDLoss", channel_weight, "channel_weight")
        self.spatial_weight = finite("FBKDLoss", spatial_weight, "spatial_weight")
        chosen = nonlocal_weight if nonloacl_weight is None else nonloacl_weight
        self.nonlocal_weight = finite("FBKDLoss", chosen, "nonlocal_weight")

    def forward(self, s_input: tuple[torch.Tensor, ...], t_input: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The weighted FBKD loss."""
        s_spatial, s_channel, s_channel_pool, s_spatial_pool, s_relation, s_feat = _parts(
            "FBKDLoss", s_input, 6, "Student")
        t_spatial, t_channel, t_spatial_pool, t_relation, t_feat = (
            v.float() for v in _parts("FBKDLoss", t_input, 5, "Teacher"))
        spatial_mask = ((t_spatial + s_spatial.float()) / 2).detach()
        channel_mask = ((t_channel + s_channel.float()) / 2).detach()
        focal = ((t_feat - s_feat.float()).pow(2) * spatial_mask * channel_mask).sum().sqrt()
        loss = (self.mask_l2_weight * focal
                + self.channel_weight * torch.dist(t_feat.mean(dim=(2, 3)), s_channel_pool.float())
                + self.spatial_weight * torch.dist(t_spatial_pool, s_spatial_pool.float())
                + self.nonlocal_weight * torch.dist(t_relation, s_relation.float()))
        return self.loss_weight * loss


register_component(FBKDLoss, "loss")
