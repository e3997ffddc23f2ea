"""Image conversion for the collate functions: PIL / NumPy / Tensor -> float CHW in [0, 1], resize + crop.

Written on plain torch (no torchvision: it does not import beside this project's torch).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from slimkit.errors import DataError


def _from_array(array: np.ndarray, channels_last: bool) -> torch.Tensor:
    """HW / HWC (NumPy, PIL) or HW / CHW (Tensor) array -> float CHW tensor in [0, 1] for integer input."""
    array = np.ascontiguousarray(array)
    if not array.flags.writeable:  # PIL-backed arrays are read-only; torch wants to own writable memory
        array = array.copy()
    tensor = torch.from_numpy(array)
    if tensor.dim() == 2:
        tensor = tensor.unsqueeze(0)
    elif tensor.dim() == 3:
        if channels_last:
            tensor = tensor.permute(2, 0, 1)
    else:
        raise DataError(
            f"An image must have 2 (H, W) or 3 dimensions; got shape {tuple(array.shape)}. "
            "Pass PIL images, HxW / HxWxC NumPy arrays, or HxW / CxHxW tensors."
        )
    if tensor.dtype == torch.bool:
        return tensor.float()
    if tensor.dtype == torch.uint16 or array.dtype == np.uint16:
        return tensor.to(torch.int32).float() / 65535.0
    if not tensor.is_floating_point():
        return tensor.float() / 255.0  # 8-bit range for every other integer type
    return tensor.float()


def to_chw_float(image: Any) -> torch.Tensor:
    """Convert one image to a float32 ``[C, H, W]`` tensor.

    PIL images and integer arrays are scaled from 0..255 (0..65535 for uint16) to [0, 1]; float arrays
    and tensors are kept as they are (they are assumed to be scaled already). PIL images in modes other
    than L / RGB (palette, CMYK, RGBA...) are converted to RGB.
    """
    if isinstance(image, torch.Tensor):
        data = image.detach().cpu()
        if data.dim() == 2:
            data = data.unsqueeze(0)
        if data.dim() != 3:
            raise DataError(f"An image tensor must be HxW or CxHxW; got shape {tuple(image.shape)}.")
        return data.float() / 255.0 if not data.is_floating_point() else data.float()
    if isinstance(image, np.ndarray):
        return _from_array(image, channels_last=True)
    if hasattr(image, "mode") and hasattr(image, "convert"):  # PIL.Image.Image, without importing PIL
        if image.mode not in ("L", "RGB"):
            image = image.convert("RGB")
        return _from_array(np.asarray(image), channels_last=True)
    raise DataError(
        f"Cannot use an image of type {type(image).__name__}; expected a PIL.Image.Image, a NumPy array "
        "(HxW or HxWxC) or a torch.Tensor (HxW or CxHxW)."
    )


def resize_short_side(image: torch.Tensor, short: int, least: int | None = None) -> torch.Tensor:
    """``[C, H, W]`` resized (antialiased bilinear) so its shorter side is ``short``, no side below ``least``."""
    height, width = image.shape[1:]
    scale, least = short / min(height, width), short if least is None else least
    new = (max(least, round(height * scale)), max(least, round(width * scale)))
    if new == (height, width):
        return image
    return F.interpolate(image[None], size=new, mode="bilinear", align_corners=False, antialias=True)[0]


def resize_center_crop(image: torch.Tensor, size: int) -> torch.Tensor:
    """Resize a ``[C, H, W]`` tensor so its shorter side is ``size`` (antialiased bilinear), then centre-crop."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise DataError(f"img_size must be a positive int; got {size!r}.")
    image = resize_short_side(image, size)
    top, left = (image.shape[1] - size) // 2, (image.shape[2] - size) // 2
    return image[:, top : top + size, left : left + size]


def stack_images(
    images: list[Any],
    img_size: int | None = None,
    channels: int | None = None,
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
) -> torch.Tensor:
    """Convert, optionally resize/crop and normalise a list of images into one ``[B, C, H, W]`` float tensor.

    Grayscale images are repeated to 3 channels when the batch mixes 1- and 3-channel images, or when
    ``channels=3`` is asked for; ``channels=1`` averages RGB to gray.
    """
    tensors = [to_chw_float(image) for image in images]
    if img_size is not None:
        tensors = [resize_center_crop(t, img_size) for t in tensors]
    if channels is not None and channels not in (1, 3):
        raise DataError(f"channels must be 1 or 3; got {channels!r}.")
    target_c = channels if channels is not None else max(t.shape[0] for t in tensors)
    converted = []
    for t in tensors:
        if t.shape[0] == target_c:
            converted.append(t)
        elif t.shape[0] == 1:
            converted.append(t.expand(target_c, -1, -1))
        elif target_c == 1 and t.shape[0] in (3, 4):
            converted.append(t[:3].mean(dim=0, keepdim=True))
        elif t.shape[0] == 4 and target_c == 3:
            converted.append(t[:3])
        else:
            raise DataError(f"Cannot convert a {t.shape[0]}-channel image to {target_c} channels.")
    shapes = {tuple(t.shape) for t in converted}
    if len(shapes) > 1:
        raise DataError(
            f"Images in a batch have different sizes {sorted(shapes)}; pass img_size=N in the collate "
            "kwargs to resize and centre-crop them to NxN."
        )
    batch = torch.stack(converted).contiguous()
    if mean is not None or std is not None:
        mean_t = torch.tensor(mean if mean is not None else (0.0,), dtype=batch.dtype).view(1, -1, 1, 1)
        std_t = torch.tensor(std if std is not None else (1.0,), dtype=batch.dtype).view(1, -1, 1, 1)
        batch = (batch - mean_t) / std_t
    return batch
