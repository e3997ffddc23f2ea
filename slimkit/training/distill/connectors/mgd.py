"""MGDConnector: mask the student's feature at random and generate the teacher's from it (MGD, ECCV 2022)."""

from __future__ import annotations

import torch
from torch import nn

from slimkit.core.registry import register_component
from slimkit.training.distill.losses.base import positive


class MGDConnector(nn.Module):
    """A 1x1 alignment (when widths differ), a random mask, then two 3x3 convs that rebuild the teacher's feature.

    Each spatial position (or channel, with ``mask_on_channel``) is zeroed with probability ``lambda_mgd``.
    """

    def __init__(self, student_channels: int, teacher_channels: int, lambda_mgd: float = 0.65,
                 mask_on_channel: bool = False) -> None:
        super().__init__()
        self.lambda_mgd = positive("MGDConnector", lambda_mgd, "lambda_mgd")
        self.mask_on_channel = bool(mask_on_channel)
        s, t = int(student_channels), int(teacher_channels)
        self.align = nn.Conv2d(s, t, 1) if s != t else None
        self.generation = nn.Sequential(nn.Conv2d(t, t, 3, padding=1), nn.ReLU(), nn.Conv2d(t, t, 3, padding=1))

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        """The generated feature."""
        if self.align is not None:
            feature = self.align(feature)
        n, c, h, w = feature.shape
        shape = (n, c, 1, 1) if self.mask_on_channel else (n, 1, h, w)
        keep = (torch.rand(shape, device=feature.device) <= 1 - self.lambda_mgd).to(feature.dtype)
        return self.generation(feature * keep)


register_component(MGDConnector, "connector")
