"""The elastic inverted-residual block of BigNAS / once-for-all MobileNetV3 supernets (MMRazor's ``MBBlock`` there).

1x1 expand (width ``in x expand_ratio``), elastic-kernel depthwise conv, optional squeeze-excite, 1x1 project; a
residual connection (stride 1, same width) or, with ``attentive=True``, AttentiveNAS's shortcut on every block
(average-pooled by the stride, a 1x1 conv when the widths differ). Every width and kernel follows the mutables it
is given; the block registers none of them itself unless it owns them (``own=True``: once-for-all's fine-grained
mode, one kernel size and expand ratio per block).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.engines.nas.dynamic_ops import DynamicBatchNorm2d, DynamicConv2d
from slimkit.engines.nas.mutables import MutableChannels, active, widest
from slimkit.faces.mmrazor.nas.elastic_ops import ElasticDepthwiseConv2d, MutableValue, Width, expanded, hold
from slimkit.faces.mmrazor.nas.mobilenet import drop_path
from slimkit.training.layers import activation


def release_widths(layer: nn.Module) -> nn.Module:
    """Keep ``layer``'s width mutables out of its submodules (their owner registers them; derived ones nobody)."""
    hold(layer, **{name: m for name, m in layer._modules.items() if isinstance(m, MutableChannels)})
    return layer


def conv_unit(conv: nn.Module, channels: Width, act_cfg: Mapping[str, Any] | None,
              momentum: float | None) -> nn.Sequential:
    """MMCV's ConvModule over dynamic layers: ``conv``, a DynamicBatchNorm2d (``momentum=None``: none), activation."""
    layers: OrderedDict[str, nn.Module] = OrderedDict(conv=release_widths(conv))
    if momentum is not None:
        layers["bn"] = release_widths(DynamicBatchNorm2d(channels, momentum=momentum))
    act = activation(act_cfg)
    if act is not None:
        layers["activate"] = act
    return nn.Sequential(layers)


def pointwise(cin: Width, cout: Width, act_cfg: Mapping[str, Any] | None, momentum: float | None) -> nn.Sequential:
    """A 1x1 dynamic conv unit (no bias)."""
    return conv_unit(DynamicConv2d(cin, cout, 1, bias=False), cout, act_cfg, momentum)


class ElasticSE(nn.Module):
    """Squeeze-excite over elastic widths: mean-pool, 1x1 to ``squeeze``, ReLU, 1x1 back, hard sigmoid, rescale."""

    def __init__(self, channels: Width, squeeze: Width) -> None:
        super().__init__()
        self.conv1 = release_widths(DynamicConv2d(channels, squeeze, 1))
        self.conv2 = release_widths(DynamicConv2d(squeeze, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` scaled per channel."""
        scale = F.relu(self.conv1(x.mean((2, 3), keepdim=True)))
        return x * F.hardsigmoid(self.conv2(scale))


class Shortcut(nn.Module):
    """AttentiveNAS's shortcut: average-pool by ``stride``, then a 1x1 conv when the active widths differ."""

    def __init__(self, cin: Width, cout: Width, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = release_widths(DynamicConv2d(cin, cout, 1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The shortcut branch."""
        if self.stride > 1:
            x = F.avg_pool2d(x, self.stride, padding=x.size(-1) & 1)
        out = active(self.conv.out_mutable) if isinstance(self.conv, DynamicConv2d) else self.conv.out_channels
        return x if x.shape[1] == out else self.conv(x)


class ElasticMBBlock(nn.Module):
    """One elastic inverted residual (see the module doc).

    ``cin`` / ``cout``: widths; ``kernel`` / ``expand_ratio``: value mutables (``own``: register them here, with
    ``se_ratio`` the SE width's own ratio as MMRazor's fine-grained mode has); ``momentum``: the batch norms'.
    """

    def __init__(self, cin: Width, cout: Width, kernel: MutableValue, expand_ratio: MutableValue, stride: int,
                 act_cfg: Mapping[str, Any], momentum: float, with_se: bool = False, attentive: bool = False,
                 transform: bool = False, own: bool = False) -> None:
        super().__init__()
        se_ratio = None
        if own:
            self.kernel_size, self.expand_ratio = kernel, expand_ratio
            if with_se:
                se_ratio = self.expand_ratio_se = MutableValue(expand_ratio.choices, alias=f"{expand_ratio.alias}_se")
        self.stride, self.attentive, self.drop_path_rate = stride, attentive, 0.0
        self.residual = stride == 1 and widest(cin) == widest(cout)
        mid = cin if max(expand_ratio.choices) == 1 else expanded(cin, expand_ratio)
        self.expand_conv = None if mid is cin else pointwise(cin, mid, act_cfg, momentum)
        self.depthwise_conv = conv_unit(ElasticDepthwiseConv2d(mid, kernel, stride, transform), mid, act_cfg, momentum)
        self.se = ElasticSE(mid, expanded(cin, se_ratio or expand_ratio, divisor=4)) if with_se else None
        self.linear_conv = pointwise(mid, cout, None, momentum)
        self.shortcut = Shortcut(cin, cout, stride) if attentive else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output on the active widths and kernel."""
        out = x if self.expand_conv is None else self.expand_conv(x)
        out = self.depthwise_conv(out)
        if self.se is not None:
            out = self.se(out)
        out = self.linear_conv(out)
        if self.shortcut is not None:
            short = self.shortcut(x)
            if short.shape[1] == x.shape[1] and self.stride == 1:
                out = drop_path(out, self.drop_path_rate, self.training)
            return short + out
        if self.residual and x.shape[1] == out.shape[1]:
            return x + drop_path(out, self.drop_path_rate, self.training)
        return out
