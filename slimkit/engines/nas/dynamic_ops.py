"""Layers whose width follows a :class:`~slimkit.engines.nas.MutableChannels`: weights sliced to the active width.

Each layer holds the weights of its widest choice and uses the first ``k`` output (and input) channels when the
width mutable says ``k``, so all widths share weights (as in slimmable networks / SPOS channel search).
``export()`` returns a plain ``nn.Conv2d`` / ``nn.Linear`` / ``nn.BatchNorm2d`` / ``nn.LayerNorm`` (or a
:class:`PositionEmbedding`) of the active width holding copies of exactly those slices, so the exported layer
computes what the dynamic one did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.core.registry import register_component
from slimkit.engines.nas.mutables import MutableChannels, active, channels_of, widest
from slimkit.errors import ConfigError

Channels = int | Sequence[int] | MutableChannels


def _check_input(layer: nn.Module, x: torch.Tensor, expected: int) -> None:
    if x.dim() < 2 or x.shape[1] != expected:
        got = x.shape[1] if x.dim() >= 2 else f"a {x.dim()}-d tensor"
        raise ConfigError(f"{type(layer).__name__} expects {expected} input channels (its current in_channels "
                          f"choice) but got {got}; pass the producing layer's MutableChannels as this layer's "
                          "in_channels so their widths move together.")


def _copy_slices(src: nn.Module, dst: Any) -> Any:
    """Fill ``dst``'s weights and buffers with the leading slices of ``src``'s (the active width); same train mode."""
    full = src.state_dict(keep_vars=True)
    with torch.no_grad():
        for name, tensor in dst.state_dict(keep_vars=True).items():
            tensor.copy_(full[name][tuple(slice(0, n) for n in tensor.shape)])
    return dst.train(src.training)


class DynamicConv2d(nn.Conv2d):
    """``nn.Conv2d`` whose in/out channels may be width mutables (``groups=1``); weights sliced to the active width.

    ``in_channels`` / ``out_channels``: an int, a list of widths (a new :class:`MutableChannels`) or a shared
    ``MutableChannels``.
    """

    def __init__(self, in_channels: Channels, out_channels: Channels, kernel_size: int | tuple[int, int],
                 stride: int = 1, padding: int | str = 0, dilation: int = 1, bias: bool = True) -> None:
        in_c, out_c = channels_of(in_channels, "in_channels"), channels_of(out_channels, "out_channels")
        super().__init__(widest(in_c), widest(out_c), kernel_size, stride, padding, dilation, 1, bias)
        # a MutableChannels becomes a submodule, so the mutator finds it (a shared one is listed once)
        self.in_mutable, self.out_mutable = in_c, out_c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Convolution with the first active out/in channels of the weights."""
        c_in, c_out = active(self.in_mutable), active(self.out_mutable)
        _check_input(self, x, c_in)
        weight = self.weight[:c_out, :c_in]
        bias = None if self.bias is None else self.bias[:c_out]
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1)

    def export(self) -> nn.Conv2d:
        """A plain ``nn.Conv2d`` of the active width with copies of the active weight slices."""
        c_in, c_out = active(self.in_mutable), active(self.out_mutable)
        conv = nn.Conv2d(c_in, c_out, self.kernel_size, self.stride, self.padding, self.dilation, 1,
                         self.bias is not None, device=self.weight.device, dtype=self.weight.dtype)
        return _copy_slices(self, conv)


class DynamicLinear(nn.Linear):
    """``nn.Linear`` whose in/out features may be width mutables; weights sliced to the active width.

    ``in_factor``: input features per input channel, for a Linear after a channel-major ``Flatten`` of
    ``C x H x W`` maps (``in_factor = H * W``): the first ``k`` channels are the first ``k * in_factor`` features.
    """

    def __init__(self, in_features: Channels, out_features: Channels, bias: bool = True, in_factor: int = 1) -> None:
        in_c, out_c = channels_of(in_features, "in_features"), channels_of(out_features, "out_features")
        if isinstance(in_factor, bool) or not isinstance(in_factor, int) or in_factor < 1:
            raise ConfigError(f"DynamicLinear in_factor must be a positive int, got {in_factor!r}.")
        super().__init__(widest(in_c) * in_factor, widest(out_c), bias)
        # a MutableChannels becomes a submodule, so the mutator finds it (a shared one is listed once)
        self.in_mutable, self.out_mutable, self.in_factor = in_c, out_c, in_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Affine map with the first active out/in features of the weights."""
        c_in, c_out = active(self.in_mutable) * self.in_factor, active(self.out_mutable)
        if x.shape[-1] != c_in:
            raise ConfigError(f"DynamicLinear expects {c_in} input features (its current in_features choice) but "
                              f"got {x.shape[-1]}; share the producing layer's MutableChannels as in_features.")
        return F.linear(x, self.weight[:c_out, :c_in], None if self.bias is None else self.bias[:c_out])

    def export(self) -> nn.Linear:
        """A plain ``nn.Linear`` of the active width with copies of the active weight slices."""
        c_in, c_out = active(self.in_mutable) * self.in_factor, active(self.out_mutable)
        linear = nn.Linear(c_in, c_out, self.bias is not None, device=self.weight.device, dtype=self.weight.dtype)
        return _copy_slices(self, linear)


class DynamicBatchNorm2d(nn.BatchNorm2d):
    """``nn.BatchNorm2d`` over the first active channels of a width mutable (sliced affine and running stats)."""

    def __init__(self, num_features: Channels, eps: float = 1e-5, momentum: float | None = 0.1) -> None:
        channels = channels_of(num_features, "num_features")
        super().__init__(widest(channels), eps, momentum)
        self.mutable = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Batch norm on the active channels; in training, updates only their running statistics."""
        c = active(self.mutable)
        _check_input(self, x, c)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch = self.training or self.running_mean is None
        mean = None if self.running_mean is None else self.running_mean[:c]
        var = None if self.running_var is None else self.running_var[:c]
        return F.batch_norm(x, mean if not self.training or self.track_running_stats else None,
                            var if not self.training or self.track_running_stats else None,
                            self.weight[:c], self.bias[:c], use_batch, factor, self.eps)

    def export(self) -> nn.BatchNorm2d:
        """A plain ``nn.BatchNorm2d`` of the active width with the active slices of weights and statistics."""
        c = active(self.mutable)
        bn = nn.BatchNorm2d(c, self.eps, self.momentum, device=self.weight.device, dtype=self.weight.dtype)
        return _copy_slices(self, bn)


class DynamicLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` over the first active features of a width mutable (last dimension; sliced affine)."""

    def __init__(self, num_features: Channels, eps: float = 1e-5) -> None:
        channels = channels_of(num_features, "num_features")
        super().__init__(widest(channels), eps)
        self.mutable = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Layer norm of the active features."""
        c = active(self.mutable)
        if x.shape[-1] != c:
            raise ConfigError(f"DynamicLayerNorm expects {c} features (its current choice) but got {x.shape[-1]}.")
        return F.layer_norm(x, (c,), self.weight[:c], self.bias[:c], self.eps)

    def export(self) -> nn.LayerNorm:
        """A plain ``nn.LayerNorm`` of the active width with the active slices of its weights."""
        c = active(self.mutable)
        return _copy_slices(self, nn.LayerNorm(c, self.eps, device=self.weight.device, dtype=self.weight.dtype))


class PositionEmbedding(nn.Module):
    """A learned embedding added to each token of ``[N, L, C]`` inputs (``weight``: ``[1, L, C]``)."""

    def __init__(self, num_tokens: int, channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, num_tokens, channels))
        nn.init.trunc_normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` plus the embedding."""
        return x + self.weight


class DynamicPositionEmbedding(PositionEmbedding):
    """:class:`PositionEmbedding` whose width follows a mutable (the first active channels of the embedding)."""

    def __init__(self, num_tokens: int, channels: Channels) -> None:
        width = channels_of(channels, "channels")
        super().__init__(num_tokens, widest(width))
        self.mutable = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` plus the embedding's active channels."""
        return x + self.weight[..., : active(self.mutable)]

    def export(self) -> PositionEmbedding:
        """A plain :class:`PositionEmbedding` holding the active slice."""
        c = active(self.mutable)
        return _copy_slices(self, PositionEmbedding(self.weight.shape[1], c).to(self.weight.device, self.weight.dtype))


#: the layer types :func:`~slimkit.engines.nas.export_subnet` turns into plain torch layers
DYNAMIC_OPS: tuple[type[nn.Module], ...] = (DynamicConv2d, DynamicLinear, DynamicBatchNorm2d, DynamicLayerNorm,
                                             DynamicPositionEmbedding)

for _cls in DYNAMIC_OPS:
    register_component(_cls, "dynamic_op")
