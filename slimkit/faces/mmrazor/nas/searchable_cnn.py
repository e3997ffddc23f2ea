"""SearchableCNN: a small image-classification supernet (kernel, width and depth choices per stage)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from slimkit.engines.nas.dynamic_ops import DynamicBatchNorm2d, DynamicConv2d, DynamicLinear
from slimkit.engines.nas.mutables import MutableChannels, MutableSequential, OneShotMutableOP
from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.builder import register_module


def conv_bn_relu(in_c: int | MutableChannels, out_c: MutableChannels, kernel: int, stride: int) -> nn.Sequential:
    """DynamicConv2d (same padding) + DynamicBatchNorm2d + ReLU."""
    return nn.Sequential(DynamicConv2d(in_c, out_c, kernel, stride, kernel // 2, bias=False),
                         DynamicBatchNorm2d(out_c), nn.ReLU())


def kernel_op(in_c: int | MutableChannels, out_c: MutableChannels, kernels: Sequence[int],
              stride: int) -> OneShotMutableOP:
    """A OneShotMutableOP over conv-bn-relu candidates named ``k3``, ``k5``... (one per kernel size)."""
    return OneShotMutableOP({f"k{k}": conv_bn_relu(in_c, out_c, k, stride) for k in kernels})


class ResidualBlock(nn.Module):
    """``x + op(x)`` with a kernel-size choice; keeps the shape, so a depth mutable may skip it."""

    def __init__(self, channels: MutableChannels, kernels: Sequence[int]) -> None:
        super().__init__()
        self.op = kernel_op(channels, channels, kernels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x + op(x)``."""
        return x + self.op(x)


class SearchStage(nn.Module):
    """One stage: a width, a first block with a kernel choice (may stride), then a depth choice of residual blocks.

    ``width`` is the stage's MutableChannels, ``first`` the first block, ``extra`` a MutableSequential that
    keeps 0..max(depth_choices) residual blocks.
    """

    def __init__(self, in_c: int | MutableChannels, widths: Sequence[int], kernels: Sequence[int], stride: int,
                 depth_choices: Sequence[int]) -> None:
        super().__init__()
        self.width = MutableChannels(widths)  # registered first: its name is "<stage>.width"
        self.first = kernel_op(in_c, self.width, kernels, stride)
        self.extra = MutableSequential([ResidualBlock(self.width, kernels) for _ in range(max(depth_choices))],
                                       depth_choices) if max(depth_choices) > 0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The first block, then the active residual blocks."""
        x = self.first(x)
        return x if self.extra is None else self.extra(x)


@register_module()
class SearchableCNN(nn.Module):
    """A CNN supernet: per stage a width choice, a kernel choice per block and a depth choice; pooled linear head.

    ``stage_widths``: the width choices of each stage; ``strides``: one per stage; ``kernel_choices``: kernel
    sizes of every block; ``depth_choices``: how many extra residual blocks a stage keeps. The defaults fit
    8x8 digits (about 59k subnets). ``razor_config`` records the arguments so a saved subnet rebuilds alone.
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10,
                 stage_widths: Sequence[Sequence[int]] = ((8, 16, 24), (16, 32, 48)), strides: Sequence[int] = (1, 2),
                 kernel_choices: Sequence[int] = (3, 5, 7), depth_choices: Sequence[int] = (0, 1, 2)) -> None:
        super().__init__()
        if len(strides) != len(stage_widths) or not stage_widths:
            raise ConfigError(f"SearchableCNN needs one stride per stage: {len(stage_widths)} stage_widths, "
                              f"{len(strides)} strides.")
        if not kernel_choices or any(not isinstance(k, int) or k < 1 or k % 2 == 0 for k in kernel_choices):
            raise ConfigError(f"kernel_choices must be odd positive ints (same padding), got {list(kernel_choices)!r}.")
        self.razor_config = {"type": "SearchableCNN", "in_channels": in_channels, "num_classes": num_classes,
                             "stage_widths": [list(w) for w in stage_widths], "strides": list(strides),
                             "kernel_choices": list(kernel_choices), "depth_choices": list(depth_choices)}
        stages: list[SearchStage] = []
        prev: int | MutableChannels = in_channels
        for widths, stride in zip(stage_widths, strides, strict=True):
            stages.append(SearchStage(prev, widths, kernel_choices, stride, depth_choices))
            prev = stages[-1].width
        self.stages = nn.Sequential(*stages)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = DynamicLinear(prev, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of the active subnet."""
        return self.head(self.pool(self.stages(x)))
