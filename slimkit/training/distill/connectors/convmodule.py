"""ConvModuleConnector: a conv (+ norm + activation) from the student's channels to the teacher's (FitNets, OFD)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError
from slimkit.training.layers import conv_module

_RELU = {"type": "ReLU"}


class ConvModuleConnector(nn.Module):
    """MMRazor's ConvModuleConnector: ``conv(in_channel -> out_channel)`` then ``norm_cfg`` and ``act_cfg`` layers.

    Defaults as MMRazor's: a 1x1 conv, no norm, ReLU (``act_cfg=None`` for none); ``norm_cfg=dict(type='BN')``
    adds a batch norm. ``conv_cfg`` may only be None or ``dict(type='Conv2d')``; ``init_cfg`` and
    ``with_spectral_norm=True`` are not supported.
    """

    def __init__(self, in_channel: int, out_channel: int, kernel_size: int | tuple[int, int] = 1,
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
                 dilation: int | tuple[int, int] = 1, groups: int = 1, bias: bool | str = "auto",
                 conv_cfg: Mapping[str, Any] | None = None, norm_cfg: Mapping[str, Any] | None = None,
                 act_cfg: Mapping[str, Any] | None = _RELU, inplace: bool = True, with_spectral_norm: bool = False,
                 padding_mode: str = "zeros", order: tuple[str, ...] = ("conv", "norm", "act")) -> None:
        super().__init__()
        if conv_cfg is not None and dict(conv_cfg).get("type") not in ("Conv2d", "Conv"):
            raise ConfigError(f"ConvModuleConnector: conv_cfg={conv_cfg!r} is not supported (None or "
                              "dict(type='Conv2d')).")
        if with_spectral_norm:
            raise ConfigError("ConvModuleConnector: with_spectral_norm=True is not supported.")
        self.in_channel, self.out_channel = int(in_channel), int(out_channel)
        self.conv_module = conv_module(self.in_channel, self.out_channel, kernel_size, stride, padding, dilation,
                                       groups, bias, norm_cfg, act_cfg, padding_mode, tuple(order))

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        """The student feature mapped to the teacher's channels."""
        if feature.dim() != 4 or feature.shape[1] != self.in_channel:
            raise ConfigError(f"ConvModuleConnector({self.in_channel} -> {self.out_channel}) got a feature of shape "
                              f"{tuple(feature.shape)}; it needs [N, {self.in_channel}, H, W]. Set in_channel to "
                              "the student layer's channel count.")
        return self.conv_module(feature)


register_component(ConvModuleConnector, "connector")
