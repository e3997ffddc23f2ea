"""SearchableMobileNetV2, its inverted-residual candidate (MBBlock) and the Identity candidate (SPOS)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.nas.staged import StagedBackbone, mutable_stage
from slimkit.training.layers import check_conv_cfg, conv_module

_BN, _RELU, _RELU6 = {"type": "BN"}, {"type": "ReLU"}, {"type": "ReLU6"}


def make_divisible(value: float, divisor: int, min_value: int | None = None, min_ratio: float = 0.9) -> int:
    """``value`` rounded to a multiple of ``divisor``, never below ``min_ratio`` of it (MobileNet's rule)."""
    new = max(min_value or divisor, int(value + divisor / 2) // divisor * divisor)
    return new + divisor if new < min_ratio * value else new


def drop_path(x: torch.Tensor, rate: float, training: bool) -> torch.Tensor:
    """Stochastic depth: zero whole samples with probability ``rate`` in training, rescale the others."""
    if not training or rate <= 0:
        return x
    keep = 1 - rate
    return x * torch.rand(x.shape[0], 1, 1, 1, device=x.device).lt(keep).to(x.dtype) / keep


@register_module(name="Identity")
class SearchableIdentity(nn.Module):
    """MMRazor's ``Identity`` candidate: nothing, or a 1x1 conv + norm when the shape must change."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, conv_cfg: Mapping[str, Any] | None = None,
                 norm_cfg: Mapping[str, Any] | None = _BN, act_cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        check_conv_cfg("SearchableIdentity", conv_cfg)
        self.downsample = (conv_module(in_channels, out_channels, 1, stride, norm_cfg=norm_cfg, act_cfg=act_cfg)
                           if stride != 1 or in_channels != out_channels else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``, downsampled when needed."""
        return x if self.downsample is None else self.downsample(x)


@register_module()
class MBBlock(nn.Module):
    """MobileNetV2's inverted residual: 1x1 expand (``expand_ratio``), ``kernel_size`` depthwise, 1x1 project.

    A residual connection when stride is 1 and the width is kept; ``drop_path_rate`` drops it per sample in
    training (stochastic depth). ``se_cfg`` and ``with_attentive_shortcut`` are not supported.
    """

    def __init__(self, kernel_size: int, expand_ratio: int, in_channels: int, out_channels: int, stride: int = 1,
                 se_cfg: Mapping[str, Any] | None = None, conv_cfg: Mapping[str, Any] | None = None,
                 norm_cfg: Mapping[str, Any] | None = _BN, act_cfg: Mapping[str, Any] | None = _RELU,
                 drop_path_rate: float = 0.0, with_attentive_shortcut: bool = False) -> None:
        super().__init__()
        check_conv_cfg("MBBlock", conv_cfg)
        if se_cfg is not None or with_attentive_shortcut:
            raise ConfigError("MBBlock: se_cfg and with_attentive_shortcut are not supported.")
        if stride not in (1, 2):
            raise ConfigError(f"MBBlock stride must be 1 or 2, got {stride!r}.")
        mid = in_channels * int(expand_ratio)
        self.residual = stride == 1 and in_channels == out_channels
        self.drop_path_rate = float(drop_path_rate)
        self.expand_conv = (conv_module(in_channels, mid, 1, norm_cfg=norm_cfg, act_cfg=act_cfg)
                            if mid != in_channels else None)
        self.depthwise_conv = conv_module(mid, mid, kernel_size, stride, kernel_size // 2, groups=mid,
                                          norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.linear_conv = conv_module(mid, out_channels, 1, norm_cfg=norm_cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output."""
        out = x if self.expand_conv is None else self.expand_conv(x)
        out = self.linear_conv(self.depthwise_conv(out))
        return x + drop_path(out, self.drop_path_rate, self.training) if self.residual else out


@register_module()
class SearchableMobileNetV2(StagedBackbone):
    """The SPOS MobileNetV2 supernet backbone (MMRazor's ``SearchableMobileNetV2``).

    A 3x3 stride-2 stem of ``first_channels``, stages ``layer1..layerN`` from ``arch_setting`` rows
    ``[channels, num_blocks, stride, mutable_cfg]`` (widths scaled by ``widen_factor`` and made divisible by
    8), then a 1x1 ``conv2`` to ``last_channels``. Returns the outputs of the layers in ``out_indices`` (a tuple).
    """

    def __init__(self, arch_setting: Sequence[Sequence[Any]], first_channels: int = 32, last_channels: int = 1280,
                 widen_factor: float = 1.0, out_indices: Sequence[int] = (7,), frozen_stages: int = -1,
                 conv_cfg: Mapping[str, Any] | None = None, norm_cfg: Mapping[str, Any] | None = _BN,
                 act_cfg: Mapping[str, Any] | None = _RELU6, norm_eval: bool = False, in_channels: int = 3) -> None:
        super().__init__()
        check_conv_cfg("SearchableMobileNetV2", conv_cfg)
        self.check_stages(len(arch_setting) + 1, out_indices, frozen_stages, norm_eval)
        channels = make_divisible(first_channels * widen_factor, 8)
        self.conv1 = conv_module(in_channels, channels, 3, 2, 1, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.layer_names: list[str] = []
        for i, row in enumerate(arch_setting):
            if len(row) != 4 or not isinstance(row[3], Mapping):
                raise ConfigError(f"SearchableMobileNetV2 arch_setting rows are [channels, num_blocks, stride, "
                                  f"mutable_cfg], got {row!r}.")
            out_c = make_divisible(row[0] * widen_factor, 8)
            self.add_module(f"layer{i + 1}", mutable_stage(row[3], channels, out_c, int(row[1]), int(row[2])))
            self.layer_names.append(f"layer{i + 1}")
            channels = out_c if int(row[1]) else channels
        self.out_channel = int(last_channels * widen_factor) if widen_factor > 1.0 else last_channels
        self.conv2 = conv_module(channels, self.out_channel, 1, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.layer_names.append("conv2")
        self._freeze()
