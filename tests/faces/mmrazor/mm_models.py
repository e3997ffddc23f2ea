"""Users' models in the shape MMRazor-style configs expect (module names of MMCls / MMDet / MMSeg models).

A user bringing their own models to an MMRazor config keeps the module paths the config's recorders name
(``head.fc``, ``neck.gap``, ``backbone.layer4.1.relu``, ``neck.fpn_convs.0.conv``, ``decode_head.conv_seg``).
These small models have those paths and the real depths; widths are small (``base``) and the configs under
``configs/`` name the widths these small models have.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.razor import batch_loss
from slimkit.training import fit


def _bn_conv(cin: int, cout: int, k: int, s: int = 1) -> tuple[nn.Conv2d, nn.BatchNorm2d]:
    return nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _bn_conv(cin, width, 3, stride)
        self.conv2, self.bn2 = _bn_conv(width, width, 3)
        self.relu = nn.ReLU()  # called twice per block, as in MMCls: record_idx=1 is the block's output
        self.downsample = (nn.Sequential(*_bn_conv(cin, width, 1, stride)) if stride != 1 or cin != width else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _bn_conv(cin, width, 1)
        self.conv2, self.bn2 = _bn_conv(width, width, 3, stride)
        self.conv3, self.bn3 = _bn_conv(width, width * 4, 1)
        self.relu = nn.ReLU()  # called three times: record_idx=2 is the block's output
        self.downsample = (nn.Sequential(*_bn_conv(cin, width * 4, 1, stride))
                           if stride != 1 or cin != width * 4 else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


DEPTHS = {18: (BasicBlock, (2, 2, 2, 2)), 34: (BasicBlock, (3, 4, 6, 3)), 50: (Bottleneck, (3, 4, 6, 3))}


class ResNet(nn.Module):
    """MMCls's ResNet (``cifar=True``: ResNet_CIFAR's 3x3 stride-1 stem without max pooling)."""

    def __init__(self, depth: int, base: int = 64, in_channels: int = 3, cifar: bool = False) -> None:
        super().__init__()
        block, counts = DEPTHS[depth]
        self.conv1, self.bn1 = _bn_conv(in_channels, base, 3 if cifar else 7, 1 if cifar else 2)
        self.relu = nn.ReLU()
        self.maxpool = nn.Identity() if cifar else nn.MaxPool2d(3, 2, 1)
        cin = base
        for i, n in enumerate(counts):
            blocks = []
            for j in range(n):
                blocks.append(block(cin, base * 2**i, 2 if i > 0 and j == 0 else 1))
                cin = base * 2**i * block.expansion
            self.add_module(f"layer{i + 1}", nn.Sequential(*blocks))
        self.out_channels = cin

    def stages(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The outputs of ``layer1`` .. ``layer4``."""
        x, outs = self.maxpool(self.relu(self.bn1(self.conv1(x)))), []
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
            outs.append(x)
        return outs

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (self.stages(x)[-1],)


class GlobalAveragePooling(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gap = nn.AdaptiveAvgPool2d(1)

    def forward(self, feats: tuple[torch.Tensor, ...] | torch.Tensor) -> torch.Tensor:
        x = feats[-1] if isinstance(feats, tuple) else feats
        return self.gap(x).flatten(1)


class LinearClsHead(nn.Module):
    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class ImageClassifier(nn.Module):
    """backbone -> neck (GlobalAveragePooling, ``neck.gap``) -> head (``head.fc``); returns the logits."""

    def __init__(self, backbone: nn.Module, in_channels: int, num_classes: int = 10) -> None:
        super().__init__()
        self.backbone, self.neck, self.head = backbone, GlobalAveragePooling(), LinearClsHead(in_channels,
                                                                                             num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.neck(self.backbone(x)))


def resnet(depth: int, num_classes: int = 10, base: int = 16, cifar: bool = False, seed: int = 0) -> ImageClassifier:
    torch.manual_seed(seed)
    backbone = ResNet(depth, base, cifar=cifar)
    return ImageClassifier(backbone, backbone.out_channels, num_classes)


class PreActBlock(nn.Module):
    """MMRazor's WideResNet block: bn1 -> relu1 -> conv1 -> bn2 -> relu2 -> conv2 (+ shortcut)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.bn1, self.relu1 = nn.BatchNorm2d(cin), nn.ReLU()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2, self.relu2 = nn.BatchNorm2d(cout), nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.downsample = nn.Conv2d(cin, cout, 1, stride, bias=False) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = self.relu1(self.bn1(x))
        out = self.conv2(self.relu2(self.bn2(self.conv1(identity))))
        return out + (x if self.downsample is None else self.downsample(identity))


class WideResNet(nn.Module):
    def __init__(self, depth: int, widen_factor: int) -> None:
        super().__init__()
        n = (depth - 4) // 6
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        cin = 16
        for i, stride in enumerate((1, 2, 2)):
            cout = 16 * 2**i * widen_factor
            self.add_module(f"layer{i + 1}", nn.Sequential(*[PreActBlock(cin if j == 0 else cout, cout,
                                                                          stride if j == 0 else 1)
                                                              for j in range(n)]))
            cin = cout
        self.bn1, self.relu = nn.BatchNorm2d(cin), nn.ReLU()
        self.out_channels = cin

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        x = self.conv1(x)
        for i in range(1, 4):
            x = getattr(self, f"layer{i}")(x)
        return (self.relu(self.bn1(x)),)


def wrn(depth: int, widen_factor: int, num_classes: int = 10, seed: int = 0) -> ImageClassifier:
    torch.manual_seed(seed)
    backbone = WideResNet(depth, widen_factor)
    return ImageClassifier(backbone, backbone.out_channels, num_classes)


class ConvModule(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class FPN(nn.Module):
    """MMDet's FPN: lateral 1x1 convs, top-down sum, 3x3 ``fpn_convs``; a 5th level by a stride-2 conv."""

    def __init__(self, in_channels: Sequence[int], out_channels: int) -> None:
        super().__init__()
        self.lateral_convs = nn.ModuleList(ConvModule(c, out_channels, 1) for c in in_channels)
        self.fpn_convs = nn.ModuleList([*(ConvModule(out_channels, out_channels, 3) for _ in in_channels),
                                        ConvModule(out_channels, out_channels, 3, 2)])

    def forward(self, feats: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        laterals = [conv(f) for conv, f in zip(self.lateral_convs, feats, strict=True)]
        for i in range(len(laterals) - 1, 0, -1):
            laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], size=laterals[i - 1].shape[2:])
        outs = [self.fpn_convs[i](lat) for i, lat in enumerate(laterals)]
        return (*outs, self.fpn_convs[-1](outs[-1]))


class TinyDetector(nn.Module):
    """backbone -> neck (FPN, 5 levels) -> bbox_head; ``extract_feat`` and MMEngine's ``loss`` (a dict).

    The "detection" task is a dense one that keeps the test small: every level classifies the image's label.
    """

    def __init__(self, depth: int = 18, base: int = 16, out_channels: int = 32, num_classes: int = 10,
                 seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.backbone = ResNet(depth, base)
        expansion = DEPTHS[depth][0].expansion
        self.neck = FPN([base * 2**i * expansion for i in range(4)], out_channels)
        self.bbox_head = nn.Conv2d(out_channels, num_classes, 3, padding=1)

    def extract_feat(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.neck(self.backbone.stages(x))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.bbox_head(f) for f in self.extract_feat(x))

    def loss(self, inputs: torch.Tensor, data_samples: torch.Tensor) -> dict[str, torch.Tensor]:
        outs = self(inputs)
        return {"loss_cls": sum(F.cross_entropy(o.mean(dim=(2, 3)), data_samples) for o in outs) / len(outs)}


class TinySegmentor(nn.Module):
    """backbone -> decode_head (``decode_head.conv_seg``: logits at 1/8 scale), upsampled to the input."""

    def __init__(self, width: int = 32, num_classes: int = 19, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.backbone = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1), nn.ReLU(), nn.Conv2d(width, width, 3, 2, 1),
                                      nn.ReLU(), nn.Conv2d(width, width, 3, 2, 1), nn.ReLU())
        self.decode_head = nn.Module()
        self.decode_head.conv_seg = nn.Conv2d(width, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(self.decode_head.conv_seg(self.backbone(x)), size=x.shape[2:], mode="bilinear",
                             align_corners=False)


def images(n: int = 2, size: int = 32, batch: int = 4, classes: int = 10, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(batch, 3, size, size, generator=g) * 255, torch.randint(classes, (batch,), generator=g))
            for _ in range(n)]


def total_loss(algo: torch.nn.Module, batch: tuple) -> float:
    """The sum of ``algo``'s named losses on ``batch`` (no gradients; the same random draws every call)."""
    torch.manual_seed(0)  # MGD's masks, CRD's negatives: drawn alike before and after training
    with torch.no_grad():
        return float(sum(v.float() for v in algo(*batch, mode="loss").values()))


def trains(algo: torch.nn.Module, data: list, keys: set[str], steps: int = 4, lr: float = 1e-3) -> dict[
        str, torch.Tensor]:
    """Check the loss dict of the first batch, train ``steps`` steps on it, check the loss fell; return the losses.

    The loss dict must have exactly ``keys``, each a finite scalar; after training the summed loss on that batch
    must be lower than before and the student's weights must have moved.
    """
    algo.train()
    losses = algo(*data[0], mode="loss")
    assert set(losses) == keys
    assert all(torch.isfinite(v) and v.dim() == 0 for v in losses.values()), losses
    first = total_loss(algo, data[0])
    before = [p.detach().clone() for p in algo.architecture.parameters()]
    result = fit(algo, data[:1], loss=batch_loss, steps=steps, lr=lr, progress=False, seed=0, num_threads=1)
    assert len(result.losses) == steps and all(torch.isfinite(torch.tensor(result.losses)))
    last = total_loss(algo, data[0])
    assert last < first, f"the loss did not fall in {steps} steps: {first:.5g} -> {last:.5g}"
    assert any(not torch.equal(a, b) for a, b in zip(before, algo.architecture.parameters(), strict=True))
    return losses


def tiny_resnet() -> ImageClassifier:
    """The CIFAR ResNet-18 at base width 8 that the pruning tests prune (10 classes, 16x16 inputs suffice)."""
    return resnet(18, cifar=True, base=8)


def out_channels(net: nn.Module, name: str) -> int:
    """Output channels of the layer ``name`` (its weight's first dimension)."""
    return net.get_submodule(name).weight.shape[0]
