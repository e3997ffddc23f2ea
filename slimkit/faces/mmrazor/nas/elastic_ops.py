"""Elastic pieces of BigNAS / once-for-all supernets: value choices, derived widths, elastic-kernel depthwise conv.

* :class:`MutableValue` -- MMRazor's ``OneShotMutableValue``: one value among ``choices`` (a kernel size, an
  expand ratio); it has no weights and disappears on export.
* :class:`DerivedChannels` -- a width computed from other mutables (``in_width x expand_ratio``); the layers that
  use it read it like any :class:`~slimkit.engines.nas.MutableChannels`, but it is kept out of the module tree
  (:func:`hold`), so the mutator samples the mutables it follows, never it.
* :class:`ElasticDepthwiseConv2d` -- a depthwise conv whose width and kernel size are elastic. The smaller kernels
  are the centre of the largest one (BigNAS, ``conv_cfg=dict(type='BigNasConv2d')``) or that centre passed
  through a learned ``k^2 x k^2`` transform per step down, initialised to the identity (once-for-all's kernel
  transformation, ``dict(type='OFAConv2d')``; Cai et al., ICLR 2020). Export gives a plain depthwise
  ``nn.Conv2d`` holding the effective kernel.
* :class:`InputResizer` -- MMRazor's searchable input size: a value mutable that resizes the batch (bilinear).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.engines.nas.dynamic_ops import DynamicConv2d
from slimkit.engines.nas.mutables import BaseMutable, MutableChannels, active, widest
from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.nas.mobilenet import make_divisible

Width = int | MutableChannels


@register_module(name="OneShotMutableValue", kind="mutable")
class MutableValue(BaseMutable):
    """One value among ``choices`` (MMRazor's ``OneShotMutableValue``: ``value_list``, ``alias``); no weights.

    The layers that read it (an elastic kernel, a derived width) hold it; the supernet registers it once, where
    its name should be. On export it disappears: the layers that used it become plain layers of the chosen size.
    """

    def __init__(self, value_list: Sequence[Any], default_value: Any = None, alias: str | None = None) -> None:
        super().__init__(value_list, default_value)
        if alias is not None and not isinstance(alias, str):
            raise ConfigError(f"{type(self).__name__} alias must be a string, got {alias!r}.")
        self.alias = alias

    def canonical_choice(self, choice: Any) -> Any:
        """A tuple written as a list (YAML subnet files) is the same choice."""
        return list(choice) if isinstance(choice, tuple) else choice

    def export(self) -> nn.Module | None:
        """Nothing: the layers that read the value are exported at the chosen size."""
        return None


class DerivedChannels(MutableChannels):
    """A width that follows other mutables: ``current_choice`` is ``rule()``; ``choices`` every value it can take.

    Never set directly; keep it out of the module tree with :func:`hold` so that no mutator samples it.
    """

    def __init__(self, rule: Callable[[], int], choices: Sequence[int]) -> None:
        super().__init__(sorted(set(choices)))
        self.rule = rule

    @property
    def current_choice(self) -> int:
        """The width the followed mutables give now."""
        return int(self.rule())

    @current_choice.setter
    def current_choice(self, choice: int) -> None:
        raise ConfigError("A DerivedChannels width follows other mutables; set those (e.g. the expand ratio).")


def expanded(width: Width, ratio: int | MutableValue, divisor: int = 1) -> DerivedChannels:
    """``width x ratio``; with ``divisor > 1``, divided by it and made divisible by 8 (an SE layer's width)."""
    from_widths = width.choices if isinstance(width, MutableChannels) else [width]

    def size(c: int, r: float) -> int:
        return int(c * r) if divisor == 1 else make_divisible(c * r / divisor, 8)

    return DerivedChannels(lambda: size(active(width), current(ratio)),
                           [size(c, r) for c in from_widths for r in choices_of(ratio)])


def hold(module: nn.Module, **values: Any) -> None:
    """Set attributes of ``module`` without registering them as submodules (derived widths, shared mutables).

    The mutator then finds a mutable only where its owner registers it, and derived widths not at all.
    """
    for name, value in values.items():
        module._modules.pop(name, None)
        module.__dict__[name] = value


def choices_of(value: int | MutableValue) -> list[int]:
    """The kernel sizes (or ratios) a fixed int or a :class:`MutableValue` allows."""
    return value.choices if isinstance(value, MutableValue) else [value]


def current(value: int | MutableValue) -> Any:
    """The active value of a fixed int or a :class:`MutableValue`."""
    return value.current_choice if isinstance(value, MutableValue) else value


class ElasticDepthwiseConv2d(DynamicConv2d):
    """Depthwise conv with an elastic width (``channels``) and kernel size (``kernel``), "same" padding, no bias.

    ``transform=True``: once-for-all's kernel transformation (see the module doc), else BigNAS's centre crop.
    """

    def __init__(self, channels: Width, kernel: int | MutableValue, stride: int = 1, transform: bool = False) -> None:
        sizes = sorted(choices_of(kernel), reverse=True)
        if any(isinstance(k, bool) or not isinstance(k, int) or k < 1 or k % 2 == 0 for k in sizes):
            raise ConfigError(f"Elastic kernel sizes must be odd positive ints, got {sizes!r}.")
        c = widest(channels)
        nn.Conv2d.__init__(self, c, c, sizes[0], stride, sizes[0] // 2, groups=c, bias=False)
        hold(self, in_mutable=channels, out_mutable=channels, kernel=kernel)
        self.sizes = sizes
        self.transforms = nn.ParameterDict({
            f"{big}to{small}": nn.Parameter(torch.eye(small * small))
            for big, small in zip(sizes, sizes[1:], strict=False)} if transform else {})

    def active_weight(self) -> torch.Tensor:
        """The kernel of the active width and size: the centre of the largest, transformed step by step."""
        k = current(self.kernel)
        weight = self.weight[: active(self.in_mutable)]
        for big, small in zip(self.sizes, self.sizes[1:], strict=False):
            if big <= k:
                break
            start = (big - small) // 2
            weight = weight[:, :, start:start + small, start:start + small]
            if self.transforms:
                flat = weight.reshape(-1, small * small) @ self.transforms[f"{big}to{small}"]
                weight = flat.reshape(weight.shape)
        return weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Depthwise convolution with :meth:`active_weight`."""
        weight = self.active_weight()
        if x.dim() != 4 or x.shape[1] != weight.shape[0]:
            raise ConfigError(f"ElasticDepthwiseConv2d expects {weight.shape[0]} channels (its current width), got "
                              f"input of shape {tuple(x.shape)}.")
        k = weight.shape[-1]
        return F.conv2d(x, weight, None, self.stride, k // 2, 1, weight.shape[0])

    def export(self) -> nn.Conv2d:
        """A plain depthwise ``nn.Conv2d`` of the active width and kernel size holding the effective kernel."""
        with torch.no_grad():
            weight = self.active_weight().clone()
        c, k = weight.shape[0], weight.shape[-1]
        conv = nn.Conv2d(c, c, k, self.stride, k // 2, groups=c, bias=False, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            conv.weight.copy_(weight)
        return conv.train(self.training)


class Resize(nn.Module):
    """Bilinear resize of an image batch to ``size`` (what an exported :class:`InputResizer` becomes)."""

    def __init__(self, size: Sequence[int]) -> None:
        super().__init__()
        self.size = [int(s) for s in size]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` resized to ``size`` (unchanged when it already has it)."""
        if list(x.shape[-2:]) == self.size:
            return x
        return F.interpolate(x, size=self.size, mode="bilinear", align_corners=False)

    def extra_repr(self) -> str:
        """The target size."""
        return f"size={self.size}"


class InputResizer(MutableValue):
    """A searchable input size (MMRazor's ``DynamicInputResizer`` with its shape mutable, alias ``input_shape``).

    ``input_sizes``: ``[[h, w], ...]``. The batch is resized to the chosen size; export gives :class:`Resize`.
    """

    def __init__(self, input_sizes: Sequence[Sequence[int]], alias: str = "input_shape") -> None:
        if isinstance(input_sizes, (str, bytes)) or not isinstance(input_sizes, Sequence) or not all(
                isinstance(s, Sequence) and len(s) == 2 and all(isinstance(v, int) and v > 0 for v in s)
                for s in input_sizes):
            raise ConfigError(f"input_resizer_cfg input_sizes must be a list of [height, width] pairs, got "
                              f"{input_sizes!r}.")
        super().__init__([list(s) for s in input_sizes], alias=alias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` resized to the chosen size."""
        return Resize(self.current_choice)(x)

    def export(self) -> Resize:
        """A fixed :class:`Resize` to the chosen size."""
        return Resize(self.current_choice)

