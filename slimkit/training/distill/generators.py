"""Image generators for data-free distillation: ZSKT's (Micaelli & Storkey 2019) and DAFL's (Chen et al. 2019).

A generator maps latent noise ``[N, latent_dim]`` to images ``[N, out_channels, img_size, img_size]``; called
with no latent it draws ``batch_size`` standard-normal vectors on its own device (torch's RNG).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError, check_int


class BaseGenerator(nn.Module):
    """Holds ``img_size``, ``latent_dim``, ``hidden_channels`` and ``out_channels``; checks the latent input."""

    def __init__(self, img_size: int, latent_dim: int, hidden_channels: int, scale_factor: int = 2,
                 out_channels: int = 3) -> None:
        super().__init__()
        for name, value in (("img_size", img_size), ("latent_dim", latent_dim), ("hidden_channels", hidden_channels),
                            ("scale_factor", scale_factor), ("out_channels", out_channels)):
            check_int(f"{type(self).__name__}: {name}", value)
        if img_size % (scale_factor**2) or hidden_channels < 2:
            raise ConfigError(f"{type(self).__name__}: img_size ({img_size}) must be a multiple of scale_factor**2 "
                              f"({scale_factor**2}) and hidden_channels ({hidden_channels}) at least 2.")
        self.img_size, self.latent_dim, self.hidden_channels = img_size, latent_dim, hidden_channels
        self.scale_factor, self.out_channels = scale_factor, out_channels
        self.init_size = img_size // scale_factor**2

    def latent(self, data: torch.Tensor | None, batch_size: int) -> torch.Tensor:
        """``data`` checked (``[N, latent_dim]``), or fresh noise for ``batch_size`` images."""
        device = next(self.parameters()).device
        if data is None:
            if batch_size < 1:
                raise ConfigError(f"{type(self).__name__}: batch_size must be >= 1 when no latent is given.")
            return torch.randn(batch_size, self.latent_dim, device=device)
        if data.dim() != 2 or data.shape[1] != self.latent_dim:
            raise ConfigError(f"{type(self).__name__} takes latents of shape [N, {self.latent_dim}], got "
                              f"{tuple(data.shape)}.")
        return data.to(device)


class ZSKTGenerator(BaseGenerator):
    """Linear -> BN -> (upsample, conv, BN, LeakyReLU) x 2 -> conv -> BN: ZSKT's generator."""

    def __init__(self, img_size: int, latent_dim: int, hidden_channels: int, scale_factor: int = 2,
                 leaky_slope: float = 0.2, out_channels: int = 3) -> None:
        super().__init__(img_size, latent_dim, hidden_channels, scale_factor, out_channels)
        h, half = hidden_channels, hidden_channels // 2
        self.linear = nn.Linear(latent_dim, h * self.init_size**2)
        self.layers = nn.Sequential(
            nn.BatchNorm2d(h), nn.Upsample(scale_factor=scale_factor), nn.Conv2d(h, h, 3, 1, 1), nn.BatchNorm2d(h),
            nn.LeakyReLU(leaky_slope), nn.Upsample(scale_factor=scale_factor), nn.Conv2d(h, half, 3, 1, 1),
            nn.BatchNorm2d(half), nn.LeakyReLU(leaky_slope), nn.Conv2d(half, out_channels, 3, 1, 1),
            nn.BatchNorm2d(out_channels))

    def forward(self, data: torch.Tensor | None = None, batch_size: int = 1) -> torch.Tensor:
        """Images from ``data`` (or from ``batch_size`` fresh latents)."""
        x = self.linear(self.latent(data, batch_size))
        return self.layers(x.view(-1, self.hidden_channels, self.init_size, self.init_size))


class DAFLGenerator(BaseGenerator):
    """Linear -> BN -> (interpolate, conv, BN, LeakyReLU) -> interpolate, conv, BN, LeakyReLU, conv, tanh, BN."""

    def __init__(self, img_size: int, latent_dim: int, hidden_channels: int, scale_factor: int = 2,
                 bn_eps: float = 0.8, leaky_slope: float = 0.2, out_channels: int = 3) -> None:
        super().__init__(img_size, latent_dim, hidden_channels, scale_factor, out_channels)
        h, half = hidden_channels, hidden_channels // 2
        self.linear = nn.Linear(latent_dim, h * self.init_size**2)
        self.bn1 = nn.BatchNorm2d(h)
        self.conv_blocks1 = nn.Sequential(nn.Conv2d(h, h, 3, 1, 1), nn.BatchNorm2d(h, eps=bn_eps),
                                          nn.LeakyReLU(leaky_slope))
        self.conv_blocks2 = nn.Sequential(nn.Conv2d(h, half, 3, 1, 1), nn.BatchNorm2d(half, eps=bn_eps),
                                          nn.LeakyReLU(leaky_slope), nn.Conv2d(half, out_channels, 3, 1, 1),
                                          nn.Tanh(), nn.BatchNorm2d(out_channels, affine=False))

    def forward(self, data: torch.Tensor | None = None, batch_size: int = 1) -> torch.Tensor:
        """Images from ``data`` (or from ``batch_size`` fresh latents)."""
        x = self.linear(self.latent(data, batch_size)).view(-1, self.hidden_channels, self.init_size, self.init_size)
        x = self.conv_blocks1(F.interpolate(self.bn1(x), scale_factor=self.scale_factor))
        return self.conv_blocks2(F.interpolate(x, scale_factor=self.scale_factor))


for _cls in (ZSKTGenerator, DAFLGenerator):
    register_component(_cls, "generator")
