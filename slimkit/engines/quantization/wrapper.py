"""The module wrapper a quantizer puts around each layer it quantizes.

In ``forward`` the wrapper quantizes the first positional input, runs the layer with its weight replaced by
the quantized weight (the stored parameter stays full precision and keeps receiving gradients), then
quantizes the output, each only when the layer's ``quant_types`` list it. The quantizer's state for the
layer (scales, zero points, observed ranges, learned step sizes) lives on the wrapper as buffers or
parameters, so it moves with ``.to()`` and appears in ``state_dict()``.

Quantizers see a dense layer's weight as ``[out, in]`` (:func:`slimkit.core.weights.weight_of`): transformers'
``Conv1D`` stores it transposed, so its per-channel scales follow output channels like a Linear's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from slimkit.core.weights import CONV1D, conv1d_type, target_kind, weight_of
from slimkit.engines.quantization.grad import QuantizerLike, QuantType


def run_with_weight(module: nn.Module, weight: torch.Tensor, args: tuple, kwargs: dict[str, Any],
                    kind: str | None = None) -> Any:
    """Run ``module`` with ``weight`` in place of its own (fast paths for Linear, Conv1D and Conv layers).

    ``weight`` is in the quantizer's layout (``[out, in]`` for a ``Conv1D``, whose stored weight is ``[in, out]``);
    ``kind`` is the module's :func:`slimkit.core.weights.target_kind` when it can no longer be read off the module.
    """
    kind = target_kind(module) if kind is None else kind
    plain = type(module) is nn.Linear or (kind == CONV1D and type(module) is conv1d_type())
    if plain and len(args) == 1 and not kwargs:
        return F.linear(args[0], weight, module.bias)
    if type(module) in (nn.Conv1d, nn.Conv2d, nn.Conv3d) and len(args) == 1 and not kwargs:
        return module._conv_forward(args[0], weight, module.bias)
    if kind == CONV1D:
        weight = weight.t()
    return functional_call(module, {"weight": weight}, args, kwargs)


def quantized_forward(module: nn.Module, kind: str | None, types: Collection[str], args: tuple, kwargs: dict[str, Any],
                      activation: Callable[[torch.Tensor, str], torch.Tensor],
                      weight: Callable[[], torch.Tensor]) -> Any:
    """``module``'s forward with the tensors ``types`` lists quantized (``activation(x, "input")``, ``weight()``)."""
    if "input" in types and args and isinstance(args[0], torch.Tensor):
        args = (activation(args[0], "input"), *args[1:])
    output = run_with_weight(module, weight(), args, kwargs, kind) if "weight" in types else module(*args, **kwargs)
    if "output" in types and isinstance(output, torch.Tensor):
        output = activation(output, "output")
    return output


class QuantizerModuleWrapper(nn.Module):
    """Wrap one layer and quantize its input, weight and/or output in ``forward``.

    Attributes: ``module`` (the original layer), ``name`` (its qualified name in the unwrapped model),
    ``type`` (its class name), ``config`` (its resolved config entry) and ``quantizer`` (the owner).
    """

    def __init__(
        self, module: nn.Module, module_name: str, module_type: str, config: dict[str, Any], quantizer: QuantizerLike
    ) -> None:
        super().__init__()
        self.module = module
        self.name = module_name
        self.type = module_type
        self.config = config
        self.quantizer = quantizer  # a plain reference (not an nn.Module, so not a submodule)
        #: the layer's :func:`slimkit.core.weights.target_kind` ("linear", "conv1d", or None for convolutions...)
        self.kind = target_kind(module)

    def layer_weight(self) -> torch.Tensor:
        """The layer's weight as quantizers see it: ``[out, in, ...]`` (a transposed view for ``Conv1D``)."""
        return weight_of(self.module)

    @property
    def quant_types(self) -> list[QuantType]:
        """The quantized tensors of this layer, as :class:`QuantType` members."""
        return [QuantType(t) for t in self.config["quant_types"]]

    def bits(self, quant_type: QuantType | str) -> int:
        """Bit width configured for ``quant_type`` on this layer."""
        return int(self.config["quant_bits"][QuantType(quant_type).value])

    def qparams(self, quant_type: QuantType | str) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The layer's current ``(scale, zero_point)`` for ``quant_type`` (``None`` where not recorded)."""
        prefix = QuantType(quant_type).value
        scale = getattr(self, f"{prefix}_scale", None)
        zero_point = getattr(self, f"{prefix}_zero_point", None)
        return (
            scale.detach() if isinstance(scale, torch.Tensor) else None,
            zero_point.detach() if isinstance(zero_point, torch.Tensor) else None,
        )

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Quantize input, weight and output as configured around the wrapped layer's forward."""
        return quantized_forward(self.module, self.kind, self.config["quant_types"], args, kwargs,
                                 lambda x, t: self.quantizer.quantize(x, QuantType(t), self),
                                 lambda: self.quantizer.quantize(self.layer_weight(), QuantType.WEIGHT, self))

    def extra_repr(self) -> str:
        """Show the layer name, type and bit widths."""
        bits = ", ".join(f"{t}={b}" for t, b in self.config["quant_bits"].items())
        return f"name={self.name!r}, type={self.type}, bits=({bits})"
