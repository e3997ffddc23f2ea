"""MMCV-style layer configs: ``norm_cfg=dict(type='BN')``, ``act_cfg=dict(type='ReLU')``, ConvModule.

These dicts are read here, never built through the registry: they describe layers, not components.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from slimkit.errors import ConfigError, closest

_NORMS = ("BN", "BN2d", "SyncBN", "GN", "LN", "IN", "IN2d")
_ACTS: dict[str, type[nn.Module]] = {
    "ReLU": nn.ReLU, "ReLU6": nn.ReLU6, "LeakyReLU": nn.LeakyReLU, "PReLU": nn.PReLU, "ELU": nn.ELU,
    "GELU": nn.GELU, "SiLU": nn.SiLU, "Swish": nn.SiLU, "Sigmoid": nn.Sigmoid, "Tanh": nn.Tanh,
    "HSwish": nn.Hardswish, "HSigmoid": nn.Hardsigmoid}


def _fields(cfg: Mapping[str, Any], what: str, allowed: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    if not isinstance(cfg, Mapping) or "type" not in cfg:
        raise ConfigError(f"{what} must be a dict with a 'type' (e.g. dict(type='BN')) or None, got {cfg!r}.")
    kind = str(cfg["type"])
    if kind not in allowed:
        raise ConfigError(f"{what} type {kind!r} is not supported.{closest(kind, allowed)} Types: "
                          f"{', '.join(allowed)}.")
    return kind, {k: v for k, v in cfg.items() if k not in ("type", "_scope_")}


def norm_layer(cfg: Mapping[str, Any] | None, channels: int) -> nn.Module | None:
    """The normalisation layer ``cfg`` describes for ``channels`` channels (``SyncBN`` is BN in one process)."""
    if cfg is None:
        return None
    kind, args = _fields(cfg, "norm_cfg", _NORMS)
    requires_grad = bool(args.pop("requires_grad", True))
    try:
        if kind in ("BN", "BN2d", "SyncBN"):
            layer: nn.Module = nn.BatchNorm2d(channels, **args)
        elif kind == "GN":
            layer = nn.GroupNorm(args.pop("num_groups"), channels, **args)
        elif kind == "LN":
            layer = nn.GroupNorm(1, channels, **args)
        else:
            layer = nn.InstanceNorm2d(channels, **args)
    except (TypeError, KeyError) as exc:
        raise ConfigError(f"norm_cfg={dict(cfg)!r}: {exc}.") from exc
    for p in layer.parameters():
        p.requires_grad_(requires_grad)
    return layer


def activation(cfg: Mapping[str, Any] | None) -> nn.Module | None:
    """The activation ``cfg`` describes (``inplace`` is ignored: a connector's input may be a recorded tensor)."""
    if cfg is None:
        return None
    kind, args = _fields(cfg, "act_cfg", tuple(_ACTS))
    args.pop("inplace", None)
    try:
        return _ACTS[kind](**args)
    except TypeError as exc:
        raise ConfigError(f"act_cfg={dict(cfg)!r}: {exc}.") from exc


def conv_module(in_channels: int, out_channels: int, kernel_size: int | tuple[int, int] = 1,
                stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
                dilation: int | tuple[int, int] = 1, groups: int = 1, bias: bool | str = "auto",
                norm_cfg: Mapping[str, Any] | None = None, act_cfg: Mapping[str, Any] | None = None,
                padding_mode: str = "zeros", order: tuple[str, ...] = ("conv", "norm", "act")) -> nn.Sequential:
    """MMCV's ConvModule as an ``nn.Sequential``: conv, then norm and activation in ``order``.

    ``bias="auto"`` gives the conv a bias only when there is no norm layer.
    """
    if sorted(order) != ["act", "conv", "norm"]:
        raise ConfigError(f"order must arrange 'conv', 'norm' and 'act', got {order!r}.")
    conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                     bias=norm_cfg is None if bias == "auto" else bool(bias), padding_mode=padding_mode)
    norm_channels = out_channels if order.index("norm") > order.index("conv") else in_channels
    layers = {"conv": conv, "norm": norm_layer(norm_cfg, norm_channels), "act": activation(act_cfg)}
    return nn.Sequential(*(layers[name] for name in order if layers[name] is not None))


def check_conv_cfg(owner: str, conv_cfg: Mapping[str, Any] | None) -> None:
    """ConfigError unless ``conv_cfg`` is None or a plain 2-D convolution (the only kind slimkit builds)."""
    if conv_cfg is not None and (not isinstance(conv_cfg, Mapping) or conv_cfg.get("type") not in ("Conv2d", "Conv")):
        raise ConfigError(f"{owner}: conv_cfg={conv_cfg!r} is not supported (None or dict(type='Conv2d')).")
