"""Detection and segmentation models in the shape MMRazor's mmdet / mmseg pruning and NAS configs expect.

Module paths are MMDet's and MMSeg's, widths are small:

- :class:`RetinaNet`: ``backbone`` (ResNet, ``layerN.M.conv1..3``), ``neck`` (FPN), ``bbox_head`` with
  ``cls_convs`` / ``reg_convs`` (ConvModules) and ``retina_cls`` / ``retina_reg``.
- :class:`FasterRCNN`: ``backbone``, ``neck``, ``rpn_head`` (``rpn_conv``, ``rpn_cls``, ``rpn_reg``) and
  ``roi_head.bbox_head`` (``shared_fcs``, ``fc_cls``, ``fc_reg``) over a fixed pooled grid of the finest level
  (RoIAlign over one box per image: the whole image).
- :class:`PointRend`: MMSeg's CascadeEncoderDecoder with ``decode_head.0`` an FPNHead (``scale_heads``,
  ``conv_seg``) and ``decode_head.1`` a PointHead (``fcs``: Conv1d, ``fc_seg``) over every point of the finest
  level with the coarse prediction concatenated, as ``coarse_pred_each_layer`` does.

The tasks are small dense stand-ins: every head classifies the image's label (boxes regress to zero), so a step
of training has a loss that falls.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from tests.faces.mmrazor.mm_models import DEPTHS, FPN, ConvModule, ResNet


def _level_widths(depth: int, base: int) -> list[int]:
    return [base * 2**i * DEPTHS[depth][0].expansion for i in range(4)]


class RetinaHead(nn.Module):
    def __init__(self, channels: int, num_classes: int, anchors: int = 3, stacked: int = 2) -> None:
        super().__init__()
        self.cls_convs = nn.ModuleList(ConvModule(channels, channels, 3) for _ in range(stacked))
        self.reg_convs = nn.ModuleList(ConvModule(channels, channels, 3) for _ in range(stacked))
        self.retina_cls = nn.Conv2d(channels, anchors * num_classes, 3, padding=1)
        self.retina_reg = nn.Conv2d(channels, anchors * 4, 3, padding=1)
        self.anchors = anchors

    def forward(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cls, reg = feat, feat
        for conv in self.cls_convs:
            cls = F.relu(conv(cls))
        for conv in self.reg_convs:
            reg = F.relu(conv(reg))
        return self.retina_cls(cls), self.retina_reg(reg)


class RetinaNet(nn.Module):
    """ResNet -> FPN (5 levels) -> RetinaHead shared over the levels; ``forward`` returns every level's maps."""

    def __init__(self, backbone: nn.Module, in_channels: Sequence[int], neck_channels: int = 16,
                 num_classes: int = 10, stacked: int = 2) -> None:
        super().__init__()
        self.backbone, self.neck = backbone, FPN(in_channels, neck_channels)
        self.bbox_head = RetinaHead(neck_channels, num_classes, stacked=stacked)

    def extract_feat(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feats = self.backbone.stages(x) if isinstance(self.backbone, ResNet) else self.backbone(x)
        return self.neck(feats)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = [self.bbox_head(f) for f in self.extract_feat(x)]
        return (*(cls for cls, _ in outs), *(reg for _, reg in outs))

    def loss(self, inputs: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        outs = self(inputs)
        levels = len(outs) // 2
        anchors = self.bbox_head.anchors

        def logits(o: torch.Tensor) -> torch.Tensor:
            return o.mean(dim=(2, 3)).view(len(inputs), anchors, -1).mean(1)

        return {"loss_cls": sum(F.cross_entropy(logits(o), labels) for o in outs[:levels]) / levels,
                "loss_bbox": sum(o.abs().mean() for o in outs[levels:]) * 0.1 / levels}


def retinanet(depth: int = 50, base: int = 8, neck_channels: int = 16, stacked: int = 2, seed: int = 0) -> RetinaNet:
    """A RetinaNet on MMDet's ResNet-``depth`` at width ``base`` (MMDet's: 64, 256, 4 stacked head convs)."""
    torch.manual_seed(seed)
    return RetinaNet(ResNet(depth, base), _level_widths(depth, base), neck_channels, stacked=stacked)


class RPNHead(nn.Module):
    def __init__(self, channels: int, anchors: int = 3) -> None:
        super().__init__()
        self.rpn_conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.rpn_cls = nn.Conv2d(channels, anchors, 1)
        self.rpn_reg = nn.Conv2d(channels, anchors * 4, 1)

    def forward(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.relu(self.rpn_conv(feat))
        return self.rpn_cls(h), self.rpn_reg(h)


class Shared2FCBBoxHead(nn.Module):
    def __init__(self, channels: int, roi_size: int, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.shared_fcs = nn.ModuleList([nn.Linear(channels * roi_size**2, hidden), nn.Linear(hidden, hidden)])
        self.fc_cls = nn.Linear(hidden, num_classes + 1)
        self.fc_reg = nn.Linear(hidden, num_classes * 4)

    def forward(self, rois: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = rois.flatten(1)
        for fc in self.shared_fcs:
            h = F.relu(fc(h))
        return self.fc_cls(h), self.fc_reg(h)


class FasterRCNN(nn.Module):
    """ResNet -> FPN -> RPN head on every level; ``roi_head.bbox_head`` on the finest level pooled to a grid."""

    def __init__(self, backbone: nn.Module, in_channels: Sequence[int], neck_channels: int = 16,
                 num_classes: int = 10, roi_size: int = 2) -> None:
        super().__init__()
        self.backbone, self.neck = backbone, FPN(in_channels, neck_channels)
        self.rpn_head = RPNHead(neck_channels)
        self.roi_head = nn.Module()
        self.roi_head.bbox_head = Shared2FCBBoxHead(neck_channels, roi_size, 32, num_classes)
        self.roi_size = roi_size

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feats = self.neck(self.backbone.stages(x) if isinstance(self.backbone, ResNet) else self.backbone(x))
        rpn = [self.rpn_head(f) for f in feats]
        cls, reg = self.roi_head.bbox_head(F.adaptive_avg_pool2d(feats[0], self.roi_size))
        return (cls, reg, *(o for pair in rpn for o in pair))

    def loss(self, inputs: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        cls, reg, *rpn = self(inputs)
        return {"loss_cls": F.cross_entropy(cls, labels), "loss_bbox": reg.abs().mean() * 0.1,
                "loss_rpn_cls": sum(o.sigmoid().mean() for o in rpn[::2]) * 0.1}


def faster_rcnn(depth: int = 50, base: int = 8, neck_channels: int = 16, seed: int = 0) -> FasterRCNN:
    """A Faster R-CNN on MMDet's ResNet-``depth`` at width ``base`` (MMDet's: 64, 256)."""
    torch.manual_seed(seed)
    return FasterRCNN(ResNet(depth, base), _level_widths(depth, base), neck_channels)


class FPNHead(nn.Module):
    """One ``scale_heads`` conv per level, upsampled to the finest and summed, then ``conv_seg``."""

    def __init__(self, channels: int, levels: int, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.scale_heads = nn.ModuleList(nn.Sequential(ConvModule(channels, hidden, 3), nn.ReLU())
                                         for _ in range(levels))
        self.conv_seg = nn.Conv2d(hidden, num_classes, 1)

    def forward(self, feats: Sequence[torch.Tensor]) -> torch.Tensor:
        out = self.scale_heads[0](feats[0])
        for head, feat in zip(self.scale_heads[1:], feats[1:], strict=True):
            out = out + F.interpolate(head(feat), size=out.shape[2:], mode="bilinear", align_corners=False)
        return self.conv_seg(out)


class PointHead(nn.Module):
    """``fcs`` (Conv1d over points, the coarse prediction concatenated before each) and ``fc_seg``."""

    def __init__(self, channels: int, hidden: int, num_classes: int, num_fcs: int = 2) -> None:
        super().__init__()
        widths = [channels] + [hidden] * num_fcs
        self.fcs = nn.ModuleList(nn.Conv1d(w + num_classes, hidden, 1) for w in widths[:-1])
        self.fc_seg = nn.Conv1d(hidden + num_classes, num_classes, 1)

    def forward(self, fine: torch.Tensor, coarse: torch.Tensor) -> torch.Tensor:
        h = fine
        for fc in self.fcs:
            h = F.relu(fc(torch.cat((h, coarse), dim=1)))
        return self.fc_seg(torch.cat((h, coarse), dim=1))


class PointRend(nn.Module):
    """CascadeEncoderDecoder: ResNet -> FPN (4 levels) -> FPNHead (coarse) -> PointHead (refined, every point)."""

    def __init__(self, backbone: ResNet, in_channels: Sequence[int], neck_channels: int = 16,
                 num_classes: int = 10) -> None:
        super().__init__()
        self.backbone, self.neck = backbone, FPN(in_channels, neck_channels)
        self.decode_head = nn.ModuleList([FPNHead(neck_channels, len(in_channels), 16, num_classes),
                                          PointHead(neck_channels, 16, num_classes)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.neck(self.backbone.stages(x))[:-1]  # FPN's extra level is not a segmentation level
        coarse = self.decode_head[0](feats)
        fine = self.decode_head[1](feats[0].flatten(2), coarse.flatten(2)).view_as(coarse)
        return F.interpolate(fine, size=x.shape[2:], mode="bilinear", align_corners=False)

    def loss(self, inputs: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss_ce": F.cross_entropy(self(inputs).mean(dim=(2, 3)), labels)}


def pointrend(depth: int = 50, base: int = 8, neck_channels: int = 16, seed: int = 0) -> PointRend:
    """A PointRend segmentor on MMSeg's ResNet-``depth`` at width ``base`` (MMSeg's: 64, 256)."""
    torch.manual_seed(seed)
    return PointRend(ResNet(depth, base), _level_widths(depth, base), neck_channels)
