"""Connectors made of one torch op: a ``torch.nn.functional`` call, a ``torch.nn`` layer, or a norm layer.

MMRazor's ``TorchFunctionalConnector`` (``function_name='avg_pool2d', func_args=dict(kernel_size=4)``),
``TorchNNConnector`` (``module_name='AvgPool2d', module_args=dict(kernel_size=4)``) and ``NormConnector``
(``in_channels``, ``norm_cfg=dict(type='BN')``): fixed reshaping between a feature and a loss (pool a map to the
teacher's size, normalise before comparing) or, for layers with weights, a learned one that trains with the
student. The allowed functions and layers are MMRazor's lists; anything else is refused naming them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError, check_int, closest
from slimkit.training.layers import norm_layer

FUNCTIONS: tuple[str, ...] = ("adaptive_avg_pool2d", "adaptive_max_pool2d", "avg_pool2d", "dropout", "dropout2d",
                              "max_pool2d", "normalize", "relu", "softmax", "interpolate")
MODULES: tuple[str, ...] = ("AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "AvgPool2d", "BatchNorm2d", "Conv2d", "Dropout",
                            "Dropout2d", "Linear", "MaxPool2d", "ReLU", "Softmax")


def _pick(owner: str, field: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{owner}: {field}={value!r} is not supported.{closest(str(value), allowed)} Supported: "
                          f"{', '.join(allowed)}.")
    return str(value)


def _args(owner: str, field: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{owner}: {field} must be a dict of keyword arguments, got {type(value).__name__}.")
    return dict(value)


class TorchFunctionalConnector(nn.Module):
    """``torch.nn.functional.<function_name>(feature, **func_args)`` (no weights)."""

    def __init__(self, function_name: str | None = None, func_args: Mapping[str, Any] | None = None,
                 init_cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.function_name = _pick("TorchFunctionalConnector", "function_name", function_name, FUNCTIONS)
        self.func_args = _args("TorchFunctionalConnector", "func_args", func_args)
        self.func = getattr(F, self.function_name)
        try:  # a wrong keyword is found now, not at the first step
            self.func(torch.zeros(1, 1, 4, 4), **self.func_args)
        except TypeError as exc:
            raise ConfigError(f"TorchFunctionalConnector({self.function_name!r}): func_args={self.func_args!r}: "
                              f"{exc}.") from exc

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        """The function applied to ``feature``."""
        return self.func(feature, **self.func_args)


class TorchNNConnector(nn.Module):
    """A ``torch.nn.<module_name>(**module_args)`` layer (learned when it has weights: Conv2d, Linear, BatchNorm2d)."""

    def __init__(self, module_name: str | None = None, module_args: Mapping[str, Any] | None = None,
                 init_cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.module_name = _pick("TorchNNConnector", "module_name", module_name, MODULES)
        args = _args("TorchNNConnector", "module_args", module_args)
        try:
            self.func = getattr(nn, self.module_name)(**args)
        except TypeError as exc:
            raise ConfigError(f"TorchNNConnector({self.module_name!r}): module_args={args!r}: {exc}.") from exc

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        """The layer applied to ``feature``."""
        return self.func(feature)


class NormConnector(nn.Module):
    """The norm layer ``norm_cfg`` describes over ``in_channels`` channels (e.g. ``dict(type='BN')``)."""

    def __init__(self, in_channels: int, norm_cfg: Mapping[str, Any],
                 init_cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.norm = norm_layer(norm_cfg, check_int("NormConnector: in_channels", in_channels))
        if self.norm is None:
            raise ConfigError("NormConnector needs norm_cfg, e.g. dict(type='BN').")

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        """``feature`` normalised."""
        return self.norm(feature)


for _cls in (TorchFunctionalConnector, TorchNNConnector, NormConnector):
    register_component(_cls, "connector")
