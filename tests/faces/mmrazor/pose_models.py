"""A user's top-down pose model in the shape MMRazor's mmpose configs expect (MMPose's module names).

``TopdownPoseEstimator``: ``backbone`` (MMPose's ResNet, the same module paths as MMCls's) and ``head``, a
``HeatmapHead``: ``head.deconv_layers`` (per stage a ``ConvTranspose2d`` with kernel 4, stride 2, padding 1 and
no bias, a ``BatchNorm2d`` and a ``ReLU``: indices 0, 1, 2, then 3, 4, 5, ...) and ``head.final_layer`` (a 1x1
conv to one heatmap per keypoint). Widths are small; the configs under ``configs/`` name these widths.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from tests.faces.mmrazor.mm_models import ResNet


class HeatmapHead(nn.Module):
    """Transposed-conv upsampling stages, then one heatmap per keypoint (each stage doubles the resolution)."""

    def __init__(self, in_channels: int, out_channels: int = 17, deconv_out_channels: Sequence[int] = (256, 256, 256)
                 ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for width in deconv_out_channels:
            layers += [nn.ConvTranspose2d(in_channels, width, 4, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
            in_channels = width
        self.deconv_layers = nn.Sequential(*layers)
        self.final_layer = nn.Conv2d(in_channels, out_channels, 1)

    def forward(self, feats: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.final_layer(self.deconv_layers(feats[-1]))


class TopdownPoseEstimator(nn.Module):
    """backbone -> head (heatmaps at 1/32 x 2**stages of the input); MMEngine's ``loss`` is the heatmap MSE."""

    def __init__(self, depth: int = 18, base: int = 8, deconv_out_channels: Sequence[int] = (16, 16),
                 num_keypoints: int = 17, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.backbone = ResNet(depth, base)
        self.head = HeatmapHead(self.backbone.out_channels, num_keypoints, deconv_out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def loss(self, inputs: torch.Tensor, data_samples: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss_kpt": F.mse_loss(self(inputs), data_samples)}


def heatmap_batches(n: int = 2, size: int = 32, batch: int = 2, keypoints: int = 17, stages: int = 2,
                    seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` batches of (images, target heatmaps at ``size / 32 * 2**stages``)."""
    g = torch.Generator().manual_seed(seed)
    side = size // 32 * 2**stages
    return [(torch.randn(batch, 3, size, size, generator=g), torch.rand(batch, keypoints, side, side, generator=g))
            for _ in range(n)]
