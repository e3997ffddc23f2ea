"""``resnet_tiny``: a seeded two-stage residual CNN with BatchNorm and a downsampling shortcut."""

from __future__ import annotations

import torch
from torch import nn

from slimkit.zoo._common import seeded
from slimkit.zoo.registry import ZooModel

TASK = "image_classification"
ARCH_DEFAULTS = {"width": 16, "num_classes": 10, "seed": 0}
INPUT_DEFAULTS = {"batch_size": 2, "image_size": 32}


class BasicBlock(nn.Module):
    """Two 3x3 Conv-BN layers plus a shortcut (1x1 Conv-BN when the shape changes)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu2 = nn.ReLU()
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Residual block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))."""
        out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.relu2(out + shortcut)


class ResNetTiny(nn.Module):
    """Stem Conv-BN-ReLU, stage 1 (width, stride 1), stage 2 (2*width, stride 2), global pool, Linear."""

    def __init__(self, width: int = 16, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.layer1 = nn.Sequential(BasicBlock(width, width, 1))
        self.layer2 = nn.Sequential(BasicBlock(width, 2 * width, 2))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map images ``[N, 3, H, W]`` to logits ``[N, num_classes]``."""
        x = self.layer2(self.layer1(self.relu(self.bn1(self.conv1(x)))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(width: int, num_classes: int, seed: int) -> nn.Module:
    """Build the residual CNN with weights drawn from ``seed``."""
    with seeded(seed):
        return ResNetTiny(width, num_classes)


def load(width: int, num_classes: int, seed: int, batch_size: int, image_size: int) -> ZooModel:
    """Build the seeded CNN and a seeded ``[batch_size, 3, image_size, image_size]`` input."""
    model = build(width, num_classes, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch_size, 3, image_size, image_size, generator=gen)
    return ZooModel(model, x, "resnet_tiny", meta={"num_classes": num_classes})
