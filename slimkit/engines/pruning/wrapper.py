"""The module wrapper a pruner puts around each layer it prunes.

The wrapper holds the masks as buffers (``weight_mask``, ``bias_mask``) and runs the original layer with
``weight * weight_mask`` substituted for its weight, so the layer's stored parameters stay untouched and the
gradient reaching a pruned weight is zero.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.func import functional_call


class PrunerModuleWrapper(nn.Module):
    """Wrap one layer: keep its masks and apply them in ``forward``.

    Attributes: ``module`` (the original layer), ``name`` (its qualified name in the unwrapped model),
    ``type`` (its class name), ``config`` (the resolved config entry for this layer).
    """

    def __init__(self, module: nn.Module, module_name: str, module_type: str, config: dict[str, Any]) -> None:
        super().__init__()
        self.module = module
        self.name = module_name
        self.type = module_type
        self.config = config
        weight = module.weight
        self.register_buffer("weight_mask", torch.ones_like(weight, dtype=_mask_dtype(weight)))
        bias = getattr(module, "bias", None)
        if isinstance(bias, torch.Tensor):
            self.register_buffer("bias_mask", torch.ones_like(bias, dtype=_mask_dtype(bias)))
        else:
            self.register_buffer("bias_mask", None)

    def masked_parameters(self) -> dict[str, torch.Tensor]:
        """The layer's weight (and bias) with the masks applied, differentiable w.r.t. the originals."""
        params = {"weight": self.module.weight * self.weight_mask}
        if self.bias_mask is not None:
            params["bias"] = self.module.bias * self.bias_mask
        return params

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the wrapped layer with masked weight/bias in place of its stored ones."""
        return functional_call(self.module, self.masked_parameters(), args, kwargs)

    @torch.no_grad()
    def apply_masks_to_module(self) -> None:
        """Multiply the masks into the wrapped layer's stored weight and bias (in place)."""
        self.module.weight.mul_(self.weight_mask.to(self.module.weight.dtype))
        if self.bias_mask is not None:
            self.module.bias.mul_(self.bias_mask.to(self.module.bias.dtype))

    def extra_repr(self) -> str:
        """Show the layer name, type and how many weights the mask keeps."""
        kept = int(self.weight_mask.count_nonzero())
        return f"name={self.name!r}, type={self.type}, kept={kept}/{self.weight_mask.numel()}"


def _mask_dtype(tensor: torch.Tensor) -> torch.dtype:
    return tensor.dtype if tensor.is_floating_point() else torch.float32
