"""FBKD connectors: attention masks, pooled descriptors and non-local relations of student and teacher features."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError
from slimkit.training.layers import norm_layer

_BN = {"type": "BN"}


class NonLocal2d(nn.Module):
    """A non-local block (Wang et al., CVPR 2018): ``x + out(attention(theta(x), phi(x)) @ g(x))``.

    ``mode``: ``"embedded_gaussian"`` (softmax of scaled dot products), ``"dot_product"`` (dot products over the
    number of positions) or ``"gaussian"`` (softmax of raw dot products). ``sub_sample`` max-pools ``g`` and
    ``phi`` by ``maxpool_stride``. ``zeros_init`` starts the block as the identity (its output norm, or conv, at 0).
    """

    def __init__(self, in_channels: int, reduction: int = 2, norm_cfg: Mapping[str, Any] | None = _BN,
                 mode: str = "embedded_gaussian", sub_sample: bool = False, maxpool_stride: int = 2,
                 zeros_init: bool = True, use_scale: bool = True) -> None:
        super().__init__()
        if mode not in ("embedded_gaussian", "dot_product", "gaussian"):
            raise ConfigError(f"NonLocal2d mode must be 'embedded_gaussian', 'dot_product' or 'gaussian', got "
                              f"{mode!r}.")
        self.mode, self.use_scale = mode, bool(use_scale)
        self.inter = max(int(in_channels) // int(reduction), 1)
        self.g = nn.Conv2d(in_channels, self.inter, 1)
        self.theta = nn.Conv2d(in_channels, self.inter, 1) if mode != "gaussian" else nn.Identity()
        self.phi = nn.Conv2d(in_channels, self.inter, 1) if mode != "gaussian" else nn.Identity()
        if sub_sample:
            self.g = nn.Sequential(self.g, nn.MaxPool2d(maxpool_stride))
            self.phi = nn.Sequential(self.phi, nn.MaxPool2d(maxpool_stride))
        norm = norm_layer(norm_cfg, in_channels)
        conv = nn.Conv2d(self.inter, in_channels, 1, bias=norm is None)
        self.conv_out = nn.Sequential(conv, *([norm] if norm is not None else []))
        if zeros_init:
            nn.init.zeros_(norm.weight if norm is not None and getattr(norm, "weight", None) is not None
                           else conv.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` plus its non-local response."""
        n, _, h, w = x.shape
        g = self.g(x).flatten(2).transpose(1, 2)           # [n, P', inter]
        theta = self.theta(x).flatten(2).transpose(1, 2)   # [n, P, inter]
        phi = self.phi(x).flatten(2)                       # [n, inter, P']
        pairwise = theta @ phi
        if self.mode == "dot_product":
            pairwise = pairwise / pairwise.shape[-1]
        else:
            if self.mode == "embedded_gaussian" and self.use_scale:
                pairwise = pairwise / math.sqrt(theta.shape[-1])
            pairwise = pairwise.softmax(dim=-1)
        y = (pairwise @ g).transpose(1, 2).reshape(n, -1, h, w)
        return x + self.conv_out(y)


def _masks(x: torch.Tensor, spatial_t: float, channel_t: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(spatial attention ``[N, 1, H, W]``, channel attention ``[N, C, 1, 1]``), each summing to its size."""
    n, c, h, w = x.shape
    spatial = torch.softmax(x.abs().mean(dim=1).reshape(n, -1) / spatial_t, dim=1).reshape(n, 1, h, w) * h * w
    channel = torch.softmax(x.abs().mean(dim=(2, 3)) / channel_t, dim=1).reshape(n, c, 1, 1) * c
    return spatial, channel


class _FBKDBase(nn.Module):
    def __init__(self, in_channels: int, reduction: int = 2, conv_cfg: Mapping[str, Any] | None = None,
                 norm_cfg: Mapping[str, Any] | None = _BN, mode: str = "dot_product", sub_sample: bool = False,
                 maxpool_stride: int = 2, zeros_init: bool = True, spatial_T: float = 0.5,  # noqa: N803
                 channel_T: float = 0.5) -> None:  # noqa: N803 (MMRazor names)
        super().__init__()
        if conv_cfg is not None and dict(conv_cfg).get("type") not in ("Conv2d", "Conv"):
            raise ConfigError(f"{type(self).__name__}: conv_cfg={conv_cfg!r} is not supported (dict(type='Conv2d')).")
        self.in_channels, self.spatial_T, self.channel_T = int(in_channels), float(spatial_T), float(channel_T)
        self.non_local = NonLocal2d(self.in_channels, reduction, norm_cfg, mode, sub_sample, maxpool_stride,
                                    zeros_init)
        self._add_layers(self.in_channels)

    def _add_layers(self, c: int) -> None:
        """Layers a side adds after the shared non-local block (the student's adaptations)."""

    def _check(self, x: torch.Tensor) -> None:
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ConfigError(f"{type(self).__name__}(in_channels={self.in_channels}) got a feature of shape "
                              f"{tuple(x.shape)}; it needs [N, {self.in_channels}, H, W].")


class FBKDStudentConnector(_FBKDBase):
    """The student side of FBKD: masks, adapted channel/spatial descriptors, adapted relation and feature."""

    def _add_layers(self, c: int) -> None:
        self.channel_wise_adaptation = nn.Linear(c, c)
        self.spatial_wise_adaptation = nn.Conv2d(1, 1, 3, padding=1)
        self.adaptation_layers = nn.Conv2d(c, c, 1)
        self.non_local_adaptation = nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(spatial mask, channel mask, channel descriptor, spatial descriptor, relation, feature), adapted."""
        self._check(x)
        spatial, channel = _masks(x, self.spatial_T, self.channel_T)
        return (spatial, channel, self.channel_wise_adaptation(x.mean(dim=(2, 3))),
                self.spatial_wise_adaptation(x.mean(dim=1, keepdim=True)),
                self.non_local_adaptation(self.non_local(x)), self.adaptation_layers(x))


class FBKDTeacherConnector(_FBKDBase):
    """The teacher side of FBKD: masks, spatial descriptor, non-local relation and the feature itself."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(spatial mask, channel mask, spatial descriptor, relation, feature)."""
        self._check(x)
        spatial, channel = _masks(x, self.spatial_T, self.channel_T)
        return spatial, channel, x.mean(dim=1, keepdim=True), self.non_local(x), x


for _cls in (FBKDStudentConnector, FBKDTeacherConnector):
    register_component(_cls, "connector")
