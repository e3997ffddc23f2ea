"""SearchableShuffleNetV2 and its candidate blocks (SPOS, Guo et al. 2020; ShuffleNetV2, Ma et al. 2018).

``arch_setting`` rows are ``[channels, num_blocks, mutable_cfg]``: each stage stacks ``num_blocks``
``OneShotMutableOP``s built from ``mutable_cfg`` (the first with stride 2), each told its channels and stride.
Mutables are named ``layers.<stage>.<block>``, as in MMRazor's subnet files (``backbone.layers.0.0`` once the
backbone sits in a classifier as ``backbone``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.nas.staged import StagedBackbone, mutable_stage
from slimkit.training.layers import check_conv_cfg, conv_module

_BN, _RELU = {"type": "BN"}, {"type": "ReLU"}


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Interleave the channels of ``groups`` groups (ShuffleNet's channel shuffle)."""
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


class _ShuffleUnit(nn.Module):
    """A ShuffleNetV2 unit: split (stride 1) or two strided branches, concatenate, shuffle."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        if out_channels % 2 or (stride == 1 and in_channels != out_channels):
            raise ConfigError(f"{type(self).__name__}: out_channels must be even and equal in_channels at stride 1, "
                              f"got in_channels={in_channels}, out_channels={out_channels}, stride={stride}.")
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride
        self.branch1: nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The unit's output (same width as ``out_channels``)."""
        if self.branch1 is not None:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        else:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        return channel_shuffle(out, 2)


def _strided_branch(in_c: int, out_c: int, kernel: int, stride: int, norm: Any, act: Any) -> nn.Sequential:
    return nn.Sequential(conv_module(in_c, in_c, kernel, stride, kernel // 2, groups=in_c, norm_cfg=norm),
                         conv_module(in_c, out_c, 1, norm_cfg=norm, act_cfg=act))


@register_module()
class ShuffleBlock(_ShuffleUnit):
    """ShuffleNetV2's block with a ``kernel_size`` (3, 5 or 7) depthwise convolution."""

    def __init__(self, kernel_size: int, in_channels: int, out_channels: int, stride: int = 1,
                 conv_cfg: Mapping[str, Any] | None = None, norm_cfg: Mapping[str, Any] | None = _BN,
                 act_cfg: Mapping[str, Any] | None = _RELU) -> None:
        super().__init__(in_channels, out_channels, stride)
        check_conv_cfg("ShuffleBlock", conv_cfg)
        if kernel_size not in (3, 5, 7):
            raise ConfigError(f"ShuffleBlock kernel_size must be 3, 5 or 7, got {kernel_size!r}.")
        half = out_channels // 2
        if stride > 1:
            self.branch1 = _strided_branch(in_channels, half, kernel_size, stride, norm_cfg, act_cfg)
        self.branch2 = nn.Sequential(
            conv_module(in_channels if stride > 1 else half, half, 1, norm_cfg=norm_cfg, act_cfg=act_cfg),
            conv_module(half, half, kernel_size, stride, kernel_size // 2, groups=half, norm_cfg=norm_cfg),
            conv_module(half, half, 1, norm_cfg=norm_cfg, act_cfg=act_cfg))


@register_module()
class ShuffleXception(_ShuffleUnit):
    """ShuffleNetV2's Xception-like block: three depthwise-separable 3x3 convolutions in the second branch."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1,
                 conv_cfg: Mapping[str, Any] | None = None, norm_cfg: Mapping[str, Any] | None = _BN,
                 act_cfg: Mapping[str, Any] | None = _RELU) -> None:
        super().__init__(in_channels, out_channels, stride)
        check_conv_cfg("ShuffleXception", conv_cfg)
        half = out_channels // 2
        if stride > 1:
            self.branch1 = _strided_branch(in_channels, half, 3, stride, norm_cfg, act_cfg)

        def separable(c_in: int, c_out: int, s: int) -> nn.Sequential:
            return nn.Sequential(conv_module(c_in, c_in, 3, s, 1, groups=c_in, norm_cfg=norm_cfg),
                                 conv_module(c_in, c_out, 1, norm_cfg=norm_cfg, act_cfg=act_cfg))

        self.branch2 = nn.Sequential(separable(in_channels if stride > 1 else half, half, stride),
                                     separable(half, half, 1), separable(half, half, 1))


@register_module()
class SearchableShuffleNetV2(StagedBackbone):
    """The SPOS ShuffleNetV2 supernet backbone (MMRazor's ``SearchableShuffleNetV2``).

    A 3x3 stride-2 stem of ``16 * stem_multiplier`` channels, the ``arch_setting`` stages (widths scaled by
    ``widen_factor``) and, with ``with_last_layer``, a 1x1 conv to 1024 channels. Returns the outputs of the
    layers in ``out_indices`` (a tuple), as MMCls backbones do. ``norm_eval`` keeps batch norms in eval mode
    while training; ``frozen_stages`` freezes the stem and that many stages. ``in_channels``: image channels.
    """

    def __init__(self, arch_setting: Sequence[Sequence[Any]], stem_multiplier: int = 1, widen_factor: float = 1.0,
                 out_indices: Sequence[int] = (4,), frozen_stages: int = -1, with_last_layer: bool = True,
                 conv_cfg: Mapping[str, Any] | None = None, norm_cfg: Mapping[str, Any] | None = _BN,
                 act_cfg: Mapping[str, Any] | None = _RELU, norm_eval: bool = False, in_channels: int = 3) -> None:
        super().__init__()
        check_conv_cfg("SearchableShuffleNetV2", conv_cfg)
        self.check_stages(len(arch_setting) + (1 if with_last_layer else 0), out_indices, frozen_stages, norm_eval)
        channels = 16 * stem_multiplier
        self.conv1 = conv_module(in_channels, channels, 3, 2, 1, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.layers = nn.ModuleList()
        for row in arch_setting:
            if len(row) != 3 or not isinstance(row[2], Mapping):
                raise ConfigError(f"SearchableShuffleNetV2 arch_setting rows are [channels, num_blocks, mutable_cfg], "
                                  f"got {row!r}.")
            out_c, blocks = round(row[0] * widen_factor), int(row[1])
            self.layers.append(mutable_stage(row[2], channels, out_c, blocks, 2))
            channels = out_c if blocks else channels
        if with_last_layer:
            self.layers.append(conv_module(channels, 1024, 1, norm_cfg=norm_cfg, act_cfg=act_cfg))
        self._freeze()

    def stages(self) -> list[nn.Module]:
        """The stages, then the last 1x1 layer (``with_last_layer``)."""
        return list(self.layers)
