"""An RTMPose-shaped top-down pose model: MMDet's CSPNeXt backbone and an RTMCC-like SimCC head.

The module paths are the ones MMRazor's RTMPose GroupFisher configs name (``backbone.stem.0.conv``,
``backbone.stage1.1.short_conv.conv``, ``backbone.stage4.2.blocks.0.conv2.pointwise_conv.conv``, ...):

- ``stem``: three 3x3 ConvModules (the first strided); ``stage1`` .. ``stage4``: a strided 3x3 ConvModule, in the
  last stage an SPPF block (``conv1``, one 5x5 max pool applied three times, ``conv2`` over the four-way concat),
  then a CSPLayer: ``main_conv`` and ``short_conv`` (1x1), ``blocks`` of CSPNeXt blocks (3x3 ``conv1``, depthwise
  separable 5x5 ``conv2`` with ``depthwise_conv`` / ``pointwise_conv``; a residual except in the last stage), the
  concat gated by ``attention`` (ChannelAttention: pooled 1x1 ``fc`` and a hard sigmoid) and ``final_conv``.
- ``head``: ``final_layer`` (a KxK conv to one map per keypoint), ``mlp`` over each flattened map, ``cls_x`` and
  ``cls_y`` (SimCC's per-axis bin logits; RTMCC's gated attention unit is left out). ``head.decoder.input_size`` is
  the (width, height) the model expects, where MMRazor's pose demo input reads it.

``rtmpose(widen_factor=0.5, deepen_factor=0.33)`` has RTMPose-s's widths and depths (stem 16-16-32, stages 64, 128,
256, 512 with 1, 2, 2, 1 blocks).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ConvModule(nn.Module):
    """conv -> bn -> activate (SiLU), MMCV's names."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False)
        self.bn, self.activate = nn.BatchNorm2d(cout), nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activate(self.bn(self.conv(x)))


class DepthwiseSeparableConvModule(nn.Module):
    def __init__(self, cin: int, cout: int, k: int) -> None:
        super().__init__()
        self.depthwise_conv = ConvModule(cin, cin, k, groups=cin)
        self.pointwise_conv = ConvModule(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise_conv(self.depthwise_conv(x))


class CSPNeXtBlock(nn.Module):
    def __init__(self, channels: int, add_identity: bool) -> None:
        super().__init__()
        self.conv1 = ConvModule(channels, channels, 3)
        self.conv2 = DepthwiseSeparableConvModule(channels, channels, 5)
        self.add_identity = add_identity

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv2(self.conv1(x))
        return out + x if self.add_identity else out


class ChannelAttention(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.global_avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Conv2d(channels, channels, 1)
        self.act = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.act(self.fc(self.global_avgpool(x)))


class CSPLayer(nn.Module):
    def __init__(self, cin: int, cout: int, num_blocks: int, add_identity: bool) -> None:
        super().__init__()
        mid = cout // 2
        self.main_conv, self.short_conv = ConvModule(cin, mid, 1), ConvModule(cin, mid, 1)
        self.final_conv = ConvModule(2 * mid, cout, 1)
        self.blocks = nn.Sequential(*(CSPNeXtBlock(mid, add_identity) for _ in range(num_blocks)))
        self.attention = ChannelAttention(2 * mid)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        both = torch.cat((self.blocks(self.main_conv(x)), self.short_conv(x)), dim=1)
        return self.final_conv(self.attention(both))


class SPPFBottleneck(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        mid = cin // 2
        self.conv1 = ConvModule(cin, mid, 1)
        self.poolings = nn.MaxPool2d(5, 1, 2)
        self.conv2 = ConvModule(4 * mid, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        y1 = self.poolings(x)
        y2 = self.poolings(y1)
        return self.conv2(torch.cat((x, y1, y2, self.poolings(y2)), dim=1))


# P5: (in, out, blocks, add_identity, use_spp) per stage, at widen_factor = deepen_factor = 1
ARCH_P5 = ((64, 128, 3, True, False), (128, 256, 6, True, False), (256, 512, 6, True, False),
           (512, 1024, 3, False, True))


class CSPNeXt(nn.Module):
    """MMDet's CSPNeXt (P5): returns the last stage's map (``out_indices=(4,)``, as RTMPose uses it)."""

    def __init__(self, widen_factor: float = 0.5, deepen_factor: float = 0.33) -> None:
        super().__init__()
        stem = int(ARCH_P5[0][0] * widen_factor)
        self.stem = nn.Sequential(ConvModule(3, stem // 2, 3, 2), ConvModule(stem // 2, stem // 2, 3),
                                  ConvModule(stem // 2, stem, 3))
        for i, (cin, cout, blocks, identity, spp) in enumerate(ARCH_P5):
            cin, cout = int(cin * widen_factor), int(cout * widen_factor)
            layers = [ConvModule(cin, cout, 3, 2)] + ([SPPFBottleneck(cout, cout)] if spp else [])
            layers.append(CSPLayer(cout, cout, max(round(blocks * deepen_factor), 1), identity))
            self.add_module(f"stage{i + 1}", nn.Sequential(*layers))
        self.out_channels = int(ARCH_P5[-1][1] * widen_factor)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        x = self.stem(x)
        for i in range(1, 5):
            x = getattr(self, f"stage{i}")(x)
        return (x,)


class SimCCCodec:
    """What MMPose's SimCC codec tells the model: ``input_size`` (width, height) and bins per pixel."""

    def __init__(self, input_size: tuple[int, int], simcc_split_ratio: float = 2.0) -> None:
        self.input_size, self.simcc_split_ratio = input_size, simcc_split_ratio


class ScaleNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale, self.g = dim**-0.5, nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / (x.norm(dim=-1, keepdim=True) * self.scale).clamp(min=1e-5) * self.g


class RTMCCHead(nn.Module):
    """final_layer -> flatten each keypoint's map -> mlp -> cls_x / cls_y (per-axis SimCC logits)."""

    def __init__(self, in_channels: int, num_keypoints: int, input_size: tuple[int, int], hidden: int = 64,
                 kernel_size: int = 7) -> None:
        super().__init__()
        self.decoder = SimCCCodec(input_size)
        width, height = input_size
        self.final_layer = nn.Conv2d(in_channels, num_keypoints, kernel_size, padding=kernel_size // 2)
        flat = (width // 32) * (height // 32)
        self.mlp = nn.Sequential(ScaleNorm(flat), nn.Linear(flat, hidden, bias=False))
        self.cls_x = nn.Linear(hidden, int(width * self.decoder.simcc_split_ratio), bias=False)
        self.cls_y = nn.Linear(hidden, int(height * self.decoder.simcc_split_ratio), bias=False)

    def forward(self, feats: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.mlp(torch.flatten(self.final_layer(feats[-1]), 2))
        return self.cls_x(h), self.cls_y(h)


class TopdownPoseEstimator(nn.Module):
    """backbone -> head; ``loss(images, keypoints)`` with keypoints (N, K, 2) in pixels: SimCC cross-entropy."""

    def __init__(self, backbone: nn.Module, head: RTMCCHead) -> None:
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.head(self.backbone(x))

    def loss(self, inputs: torch.Tensor, keypoints: torch.Tensor) -> dict[str, torch.Tensor]:
        pred_x, pred_y = self(inputs)
        bins = (keypoints * self.head.decoder.simcc_split_ratio).long()
        return {"loss_kpt": F.cross_entropy(pred_x.flatten(0, 1), bins[..., 0].flatten())
                + F.cross_entropy(pred_y.flatten(0, 1), bins[..., 1].flatten())}


def rtmpose(widen_factor: float = 0.5, deepen_factor: float = 0.33, num_keypoints: int = 17,
            input_size: tuple[int, int] = (192, 256), seed: int = 0) -> TopdownPoseEstimator:
    """RTMPose's shape (RTMPose-s at the defaults); ``input_size`` is (width, height), multiples of 32."""
    torch.manual_seed(seed)
    backbone = CSPNeXt(widen_factor, deepen_factor)
    return TopdownPoseEstimator(backbone, RTMCCHead(backbone.out_channels, num_keypoints, input_size))


def keypoint_batches(n: int, batch: int, input_size: tuple[int, int], num_keypoints: int = 17,
                     seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` batches of (images, keypoints in pixels) for a model taking ``input_size`` (width, height)."""
    g = torch.Generator().manual_seed(seed)
    width, height = input_size
    size = torch.tensor([width, height], dtype=torch.float32)
    return [(torch.rand(batch, 3, height, width, generator=g), torch.rand(batch, num_keypoints, 2, generator=g) * size)
            for _ in range(n)]
