"""A small EfficientNet-B0-shaped network for the dependency-aware pruning tests (no downloads).

Stem (TF-"SAME" padded 3x3/2 conv, a ``Conv2dSame`` subclass of ``nn.Conv2d`` as in TF ports) -> MBConv
blocks (1x1 expand + BN + SiLU, kxk depthwise + BN + SiLU, squeeze-excite with a sigmoid gate, 1x1 project
+ BN, identity skip when the shape allows) -> 1x1 head conv -> global pool -> Linear. The block table is
EfficientNet-B0's with fewer repeats and a width multiplier, so every coupling kind is there: residual
streams, depthwise chains, the SE gate multiplying the depthwise output.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# expansion, kernel, stride, output channels, repeats (EfficientNet-B0's stages, repeats trimmed)
B0_LITE_STAGES = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 2), (6, 5, 1, 112, 2))


class Conv2dSame(nn.Conv2d):
    """``nn.Conv2d`` with TensorFlow's "SAME" padding computed from the input size in ``forward``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pads = []
        for size, k, s, d in zip(x.shape[-2:], self.kernel_size, self.stride, self.dilation, strict=True):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            pads = [total // 2, total - total // 2, *pads]
        return F.conv2d(F.pad(x, pads), self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


def conv_bn(cin: int, cout: int, kernel: int = 1, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    """Conv (no bias) -> BatchNorm -> SiLU (or no activation)."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.SiLU()) if act else nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    """Global pool -> 1x1 reduce + SiLU -> 1x1 expand + sigmoid -> scale the input channels."""

    def __init__(self, channels: int, reduced: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(x.mean((2, 3), keepdim=True)))))


class MBConv(nn.Module):
    """Inverted residual with squeeze-excite (EfficientNet's MBConv)."""

    def __init__(self, cin: int, cout: int, expand: int, kernel: int, stride: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.expand = conv_bn(cin, hidden) if expand != 1 else nn.Identity()
        self.dw = conv_bn(hidden, hidden, kernel, stride, groups=hidden)
        self.se = SqueezeExcite(hidden, max(1, cin // 4))
        self.project = conv_bn(hidden, cout, act=False)
        self.skip = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.skip else y


class EfficientNetLite(nn.Module):
    """EfficientNet-B0-shaped classifier; ``width`` scales every channel count."""

    def __init__(self, width: float = 0.5, num_classes: int = 10) -> None:
        super().__init__()
        ch = lambda c: max(8, int(c * width + 4) // 8 * 8)  # noqa: E731 - the width rounding of EfficientNet
        self.stem = nn.Sequential(Conv2dSame(3, ch(32), 3, 2, bias=False), nn.BatchNorm2d(ch(32)), nn.SiLU())
        blocks, cin = [], ch(32)
        for expand, kernel, stride, cout, repeats in B0_LITE_STAGES:
            for i in range(repeats):
                blocks.append(MBConv(cin, ch(cout), expand, kernel, stride if i == 0 else 1))
                cin = ch(cout)
        self.blocks = nn.Sequential(*blocks)
        self.head = conv_bn(cin, ch(1280))
        self.classifier = nn.Linear(ch(1280), num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.head(self.blocks(self.stem(x))).mean((2, 3)))


def efficientnet_lite(seed: int = 0) -> EfficientNetLite:
    """A seeded model in eval mode whose BatchNorms carry non-trivial statistics (as after training)."""
    torch.manual_seed(seed)
    model = EfficientNetLite()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def conv_params(model: nn.Module) -> int:
    """Parameters of every Conv layer (weights and biases)."""
    return sum(p.numel() for m in model.modules() if isinstance(m, nn.Conv2d) for p in m.parameters(recurse=False))
