"""ImgDataPreprocessor: MMEngine's image normalisation before the model (mean / std, BGR <-> RGB, padding)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.builder import register_module


@register_module()
class ImgDataPreprocessor(nn.Module):
    """``(x[:, flipped channels] - mean) / std`` on image batches ``[N, C, H, W]``, then padding.

    MMRazor's configs give ``mean`` / ``std`` on the 0-255 scale of raw pixels: when your batches are already
    normalised, build with ``data_preprocessor=None``. ``bgr_to_rgb`` / ``rgb_to_bgr`` reverse the channel order
    of 3-channel images; ``pad_size_divisor`` pads height and width up to a multiple of it with ``pad_value``.
    """

    def __init__(self, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 pad_size_divisor: int = 1, pad_value: float = 0, bgr_to_rgb: bool = False, rgb_to_bgr: bool = False,
                 non_blocking: bool = False) -> None:
        super().__init__()
        if bgr_to_rgb and rgb_to_bgr:
            raise ConfigError("ImgDataPreprocessor: bgr_to_rgb and rgb_to_bgr cannot both be True.")
        if (mean is None) != (std is None) or (mean is not None and len(mean) != len(std)):
            raise ConfigError(f"ImgDataPreprocessor needs mean and std of the same length (or neither), got "
                              f"{mean!r} and {std!r}.")
        self.flip = bool(bgr_to_rgb or rgb_to_bgr)
        self.pad_size_divisor, self.pad_value = int(pad_size_divisor), float(pad_value)
        self.normalize = mean is not None
        self.register_buffer("mean", torch.tensor(list(mean or []), dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(list(std or []), dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """The preprocessed batch."""
        if not isinstance(inputs, torch.Tensor) or inputs.dim() != 4:
            raise ConfigError(f"ImgDataPreprocessor takes image batches [N, C, H, W], got "
                              f"{tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__}.")
        x = inputs.float()
        if self.flip and x.shape[1] == 3:
            x = x.flip(1)
        if self.normalize:
            if x.shape[1] != self.mean.shape[1]:
                raise ConfigError(f"ImgDataPreprocessor has {self.mean.shape[1]} channel means but the images have "
                                  f"{x.shape[1]} channels; build with data_preprocessor=None (or your own "
                                  "mean/std) for these images.")
            x = (x - self.mean) / self.std
        if self.pad_size_divisor > 1:
            h, w = x.shape[2:]
            pad_h, pad_w = (-h) % self.pad_size_divisor, (-w) % self.pad_size_divisor
            x = F.pad(x, (0, pad_w, 0, pad_h), value=self.pad_value)
        return x


@register_module()
class ClsDataPreprocessor(ImgDataPreprocessor):
    """MMClassification's preprocessor as MMRazor's configs name it (``type='mmcls.ClsDataPreprocessor'``).

    :class:`ImgDataPreprocessor` with ``to_rgb`` (MMCls's name for ``bgr_to_rgb``); ``num_classes`` and
    ``to_onehot`` concern the labels, which slimkit's losses take as class indices (read and unused).
    ``batch_augments`` (Mixup, CutMix) are not supported: give ``None``.
    """

    def __init__(self, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 pad_size_divisor: int = 1, pad_value: float = 0, to_rgb: bool = False, to_onehot: bool = False,
                 num_classes: int | None = None, batch_augments: object = None, non_blocking: bool = False) -> None:
        if batch_augments is not None:
            raise ConfigError(f"ClsDataPreprocessor: batch_augments={batch_augments!r} (Mixup / CutMix) is not "
                              "supported; build with batch_augments=None and augment in your data pipeline.")
        super().__init__(mean, std, pad_size_divisor, pad_value, bgr_to_rgb=bool(to_rgb), non_blocking=non_blocking)
