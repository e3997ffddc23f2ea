"""Binarized neural networks: +-1 weights and activations (Courbariaux et al., 2016; NNI's ``BNNQuantizer``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.compressor import Quantizer
from slimkit.engines.quantization.grad import QuantGrad, QuantType
from slimkit.engines.quantization.observers import channel_view
from slimkit.engines.quantization.wrapper import QuantizerModuleWrapper


class BNNGrad(QuantGrad):
    """The BNN paper's straight-through estimator: the gradient passes where ``|x| <= 1``, zero elsewhere."""

    @staticmethod
    def quant_backward(  # type: ignore[override]  # the three-argument form QuantGrad accepts
        tensor: torch.Tensor, grad_output: torch.Tensor, quant_type: QuantType
    ) -> torch.Tensor:
        """Cancel the gradient where the input's magnitude exceeds 1 (hard-tanh derivative)."""
        return grad_output.masked_fill(tensor.abs() > 1, 0.0)


def binarize(x: torch.Tensor) -> torch.Tensor:
    """``+1`` where ``x > 0``, ``-1`` elsewhere (no zeros, unlike ``torch.sign``)."""
    return torch.where(x > 0, torch.ones_like(x), -torch.ones_like(x))


class BNNEngine(Quantizer):
    """Binarize weights to ``+-alpha`` and outputs to ``+-1`` (1 bit each), trained with :class:`BNNGrad`.

    Weights: ``alpha * sign(w)`` where ``alpha`` is the mean ``|w|`` of each output channel (XNOR-Net's
    scaling, which lets a pretrained network keep its activation scale; ``scale_weights=False`` gives the
    paper's plain +-1). After every optimizer step the latent real weights are clipped to [-1, 1], as in the
    paper. Outputs (list ``"output"`` for activation layers such as ``ReLU`` or ``Hardtanh``) become +-1.
    In the affine form, code 1 is ``+`` and code 0 is ``-`` (zero point 1/2).
    """

    user_name = "BNNQuantizer"  # NNI's name for it (slimkit.faces.nni: 2.x and 3.0 signatures)

    quant_grad = BNNGrad
    bits_range = (1, 1)
    supported_quant_types = ("weight", "output")

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
        scale_weights: bool = True,
    ) -> None:
        self.scale_weights = bool(scale_weights)
        super().__init__(model, config_list, optimizer, dummy_input)

    def _init_wrapper(self, wrapper: QuantizerModuleWrapper) -> None:
        """Register the affine form: scale ``2 * alpha`` (per channel for weights), zero point 1/2."""
        for quant_type in wrapper.quant_types:
            shape: tuple[int, ...] = (1,)
            device = self.device
            if quant_type is QuantType.WEIGHT:
                weight = wrapper.layer_weight()
                if self.scale_weights and weight.dim() > 1:
                    shape = (weight.shape[0], *([1] * (weight.dim() - 1)))
            wrapper.register_buffer(f"{quant_type.value}_scale", torch.full(shape, 2.0, device=device))
            wrapper.register_buffer(f"{quant_type.value}_zero_point", torch.full(shape, 0.5, device=device))

    def quantize_weight(self, weight: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """``alpha * sign(w)`` with per-channel ``alpha = mean|w|`` (or 1 without scaling)."""
        if self.scale_weights:
            flat = weight.detach().abs().reshape(weight.shape[0], -1) if weight.dim() > 1 else weight.detach().abs()
            alpha = flat.mean(dim=-1) if weight.dim() > 1 else flat.mean().reshape(1)
            alpha = channel_view(alpha.clamp(min=1e-12), weight.dim()) if weight.dim() > 1 else alpha
            wrapper.weight_scale.copy_(2 * alpha)
        return binarize(weight) * (wrapper.weight_scale / 2)

    def quantize_output(self, output: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """``sign(output)`` with ``+1`` for positive values and ``-1`` otherwise."""
        return binarize(output)

    def step(self) -> None:
        """Count the step, then clip the latent real weights to [-1, 1] (the BNN paper's weight clipping)."""
        super().step()
        with torch.no_grad():
            for wrapper in self.modules_wrapper:
                if QuantType.WEIGHT in wrapper.quant_types:
                    wrapper.module.weight.clamp_(-1.0, 1.0)
