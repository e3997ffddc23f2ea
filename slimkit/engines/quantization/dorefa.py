"""DoReFa-Net weight (and activation) quantization (Zhou et al., 2016; NNI's ``DoReFaQuantizer``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.compressor import Quantizer
from slimkit.engines.quantization.grad import QuantType, round_ste
from slimkit.engines.quantization.observers import qmax_for
from slimkit.engines.quantization.wrapper import QuantizerModuleWrapper


class DoReFaEngine(Quantizer):
    """DoReFa: ``w_q = 2 * quantize_k(tanh(w) / (2 max|tanh(w)|) + 1/2) - 1`` on a uniform grid in [-1, 1].

    ``quantize_k(x) = round((2**k - 1) x) / (2**k - 1)`` with a straight-through round; the tanh and the
    normalisation stay differentiable, as in the paper (so ``quant_grad`` is ``None``). Inputs and outputs, when
    listed in ``quant_types``, are clamped to [0, 1] and quantized with ``quantize_k`` (the paper's activation
    quantizer; it suits networks whose activations live in [0, 1]; NNI 3.0 quantizes inputs with it too).

    Args:
        rescale: multiply the [-1, 1] weights by the layer's ``max |w|`` so a pretrained network keeps its
            activation scale (the paper trains from scratch and does not rescale: pass ``False``).
    """

    user_name = "DoReFaQuantizer"  # NNI's name for it (slimkit.faces.nni: 2.x and 3.0 signatures)

    quant_grad = None
    supported_quant_types = ("weight", "input", "output")

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
        rescale: bool = True,
    ) -> None:
        self.rescale = bool(rescale)
        super().__init__(model, config_list, optimizer, dummy_input)

    def _init_wrapper(self, wrapper: QuantizerModuleWrapper) -> None:
        """Register the affine form of the grids (weight scale depends on the weights, output's is fixed)."""
        device = self.device
        for quant_type in wrapper.quant_types:
            n = qmax_for(wrapper.bits(quant_type))
            if quant_type is QuantType.WEIGHT:
                scale, zero_point = 2.0 / n, n / 2.0  # w_q = (code - n/2) * 2/n (times max|w| when rescaled)
            else:
                scale, zero_point = 1.0 / n, 0.0
            wrapper.register_buffer(f"{quant_type.value}_scale", torch.full((1,), scale, device=device))
            wrapper.register_buffer(f"{quant_type.value}_zero_point", torch.full((1,), zero_point, device=device))

    def quantize_weight(self, weight: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """DoReFa's k-bit weight quantizer (optionally rescaled to the layer's weight range)."""
        n = qmax_for(wrapper.bits(QuantType.WEIGHT))
        t = torch.tanh(weight)
        normalised = t / (2 * t.abs().max().clamp(min=1e-12)) + 0.5
        quantized = 2 * round_ste(normalised * n) / n - 1
        with torch.no_grad():
            wrapper.weight_scale.fill_(2.0 / n)
        if self.rescale:
            magnitude = weight.detach().abs().max().clamp(min=1e-12)
            quantized = quantized * magnitude
            with torch.no_grad():
                wrapper.weight_scale.mul_(magnitude)
        return quantized

    @staticmethod
    def _activation(x: torch.Tensor, bits: int) -> torch.Tensor:
        """DoReFa's k-bit activation quantizer: clamp to [0, 1], then a uniform grid with 2**k levels."""
        n = qmax_for(bits)
        return round_ste(torch.clamp(x, 0.0, 1.0) * n) / n

    def quantize_output(self, output: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """The activation quantizer on the layer's output."""
        return self._activation(output, wrapper.bits(QuantType.OUTPUT))

    def quantize_input(self, inputs: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """The activation quantizer on the layer's input."""
        return self._activation(inputs, wrapper.bits(QuantType.INPUT))
