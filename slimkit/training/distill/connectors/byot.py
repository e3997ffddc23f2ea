"""BYOTConnector: the shallow classifier a "Be Your Own Teacher" student hangs on an early stage (Zhang et al. 2019).

The feature is reweighted by an attention map (separable conv, norm, ReLU, 2x upsampling, sigmoid), brought to
the deepest stage's width by ``log2(out_channel / in_channel)`` separable convs (each doubling the channels),
pooled and classified. It returns ``(pooled feature, logits)``: a distiller mapping picks one with
``connector_idx`` (the feature for the hint loss, the logits for the label and KL losses).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError, check_int


def sep_conv(in_channels: int, out_channels: int, kernel_size: int, stride: int) -> nn.Sequential:
    """DARTS's separable conv: twice (ReLU, depthwise ``kernel_size`` conv, 1x1 conv, BN); the first strides."""
    pad = kernel_size // 2
    return nn.Sequential(
        nn.ReLU(), nn.Conv2d(in_channels, in_channels, kernel_size, stride, pad, groups=in_channels, bias=False),
        nn.Conv2d(in_channels, in_channels, 1, bias=False), nn.BatchNorm2d(in_channels),
        nn.ReLU(), nn.Conv2d(in_channels, in_channels, kernel_size, 1, pad, groups=in_channels, bias=False),
        nn.Conv2d(in_channels, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels))


class BYOTConnector(nn.Module):
    """Attention + separable convs + pooling + a linear classifier on an early feature of ``in_channel * expansion``.

    ``out_channel / in_channel`` must be a power of two; ``pool_size`` is the average pooling window after the
    convs (the feature must then be 1x1 for the classifier: pick ``stride`` and ``pool_size`` to match).
    """

    def __init__(self, in_channel: int, out_channel: int, num_classes: int, expansion: int = 4,
                 pool_size: int | tuple[int, int] = 4, kernel_size: int = 3, stride: int = 1,
                 init_cfg: dict | None = None) -> None:
        super().__init__()
        for name, value in (("in_channel", in_channel), ("out_channel", out_channel), ("num_classes", num_classes),
                            ("expansion", expansion)):
            check_int(f"BYOTConnector: {name}", value)
        steps = math.log2(out_channel / in_channel)
        if not steps.is_integer() or steps < 0:
            raise ConfigError(f"BYOTConnector: out_channel / in_channel must be a power of two (each separable conv "
                              f"doubles the channels), got {out_channel} / {in_channel}.")
        width = in_channel * expansion
        self.attention = nn.Sequential(sep_conv(width, width, kernel_size, stride), nn.BatchNorm2d(width), nn.ReLU(),
                                       nn.Upsample(scale_factor=2, mode="bilinear"), nn.Sigmoid())
        self.scala = nn.Sequential(*(sep_conv(width * 2**i, width * 2 ** (i + 1), kernel_size, stride)
                                     for i in range(int(steps))), nn.AvgPool2d(pool_size))
        self.fc = nn.Linear(out_channel * expansion, num_classes)

    def forward(self, feature: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pooled feature [N, out_channel * expansion], logits [N, num_classes])``."""
        attention = self.attention(feature)
        if attention.shape != feature.shape:
            raise ConfigError(f"BYOTConnector: the attention map has shape {tuple(attention.shape)} for a feature of "
                              f"{tuple(feature.shape)}; with stride={self.attention[0][1].stride[0]} the feature's "
                              "height and width must be even.")
        feat = self.scala(attention * feature).flatten(1)
        if feat.shape[1] != self.fc.in_features:
            raise ConfigError(f"BYOTConnector: the pooled feature has {feat.shape[1]} values per sample, the "
                              f"classifier takes {self.fc.in_features}; adjust pool_size / stride to the feature "
                              f"size {tuple(feature.shape[2:])}.")
        return feat, self.fc(feat)


register_component(BYOTConnector, "connector")
