"""ABLoss: activation-boundary transfer (Heo et al., AAAI 2019), MMRazor's ``ABLoss``.

The student learns where each teacher neuron switches on: a neuron that is active in the teacher (``t > 0``)
must be at least ``margin`` above zero in the student, an inactive one at least ``margin`` below. The hinge
is squared so the loss is piecewise differentiable (the paper's "alternative" L2 criterion):

    sum((s + m)^2 * [s > -m and t <= 0] + (s - m)^2 * [s <= m and t > 0]) / N * 3 / 1000

(``N`` the batch size; the 3 / 1000 scale is the one MMRazor's configs are tuned for).
"""

from __future__ import annotations

import torch

from slimkit.core.registry import register_component
from slimkit.training.distill.losses.base import DistillLoss, check_pair, positive


class ABLoss(DistillLoss):
    """Activation-boundary loss between student ``s_feature`` and teacher ``t_feature`` (same shape).

    ``margin``: how far past zero a student activation must lie on the teacher's side of the boundary.
    """

    def __init__(self, loss_weight: float = 1.0, margin: float = 1.0) -> None:
        super().__init__(loss_weight)
        self.margin = positive("ABLoss", margin, "margin")

    def forward(self, s_feature: torch.Tensor, t_feature: torch.Tensor) -> torch.Tensor:
        """The weighted boundary loss (a scalar)."""
        check_pair("ABLoss", s_feature, t_feature)
        s, t, m = s_feature.float(), t_feature.float(), self.margin
        on, off = (t > 0).float(), (t <= 0).float()
        too_low = (s + m).pow(2) * ((s > -m).float() * off)
        too_high = (s - m).pow(2) * ((s <= m).float() * on)
        return self.loss_weight * (too_low + too_high).sum() / s.shape[0] * 3 / 1000


register_component(ABLoss, "loss")
