"""The module wrapper a quantizer puts around each layer it quantizes.

In ``forward`` the wrapper quantizes the first positional input, runs the layer with its weight replaced by
the quantized weight (the stored parameter stays full precision and keeps receiving gradients), then
quantizes the output, each only when the layer's ``quant_types`` list it. The quantizer's state for the
layer (scales, zero points, observed ranges, learned step sizes) lives on the wrapper as buffers or
parameters, so it moves with ``.to()`` and appears in ``state_dict()``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from slimkit.compression.quantization.grad import QuantizerLike, QuantType


def run_with_weight(module: nn.Module, weight: torch.Tensor, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Run ``module`` with ``weight`` in place of its own (fast paths for Linear and Conv layers)."""
    if type(module) is nn.Linear and len(args) == 1 and not kwargs:
        return F.linear(args[0], weight, module.bias)
    if type(module) in (nn.Conv1d, nn.Conv2d, nn.Conv3d) and len(args) == 1 and not kwargs:
        return module._conv_forward(args[0], weight, module.bias)
    return functional_call(module, {"weight": weight}, args, kwargs)


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
        types = self.config["quant_types"]
        if "input" in types and args and isinstance(args[0], torch.Tensor):
            args = (self.quantizer.quantize(args[0], QuantType.INPUT, self), *args[1:])
        if "weight" in types:
            weight = self.quantizer.quantize(self.module.weight, QuantType.WEIGHT, self)
            output = run_with_weight(self.module, weight, args, kwargs)
        else:
            output = self.module(*args, **kwargs)
        if "output" in types and isinstance(output, torch.Tensor):
            output = self.quantizer.quantize(output, QuantType.OUTPUT, self)
        return output

    def extra_repr(self) -> str:
        """Show the layer name, type and bit widths."""
        bits = ", ".join(f"{t}={b}" for t, b in self.config["quant_bits"].items())
        return f"name={self.name!r}, type={self.type}, bits=({bits})"
