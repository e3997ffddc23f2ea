"""NNI's ``NaiveQuantizer``: symmetric per-tensor weight quantization (8 bits by default), no data needed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.compressor import Quantizer
from slimkit.engines.quantization.grad import QuantType
from slimkit.engines.quantization.observers import fake_quantize, symmetric_qparams
from slimkit.engines.quantization.wrapper import QuantizerModuleWrapper

#: what an empty ``config_list`` means (NNI's example experiment passes ``[]``): 8-bit weights of Conv/Linear
DEFAULT_CONFIG_LIST: list[dict[str, Any]] = [{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["default"]}]


class NaiveQuantizer(Quantizer):
    """Quantize each layer's weight on a symmetric grid ``scale * (code - 2**(bits-1))`` around zero.

    ``scale = max|w| / ((2**bits - 1) / 2)`` per layer, never shrinking while the model trains (NNI keeps the
    largest scale seen), and codes are rounded to the nearest step (NNI truncates towards zero, which biases
    every weight to smaller magnitudes). An empty ``config_list`` means :data:`DEFAULT_CONFIG_LIST`. The
    rounding passes gradients straight through, so the model can be fine-tuned while quantized.
    """

    supported_quant_types = ("weight",)
    #: what an empty (or missing) ``config_list`` means
    default_config_list = DEFAULT_CONFIG_LIST

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]] | None = None,
                 optimizer: torch.optim.Optimizer | None = None, dummy_input: Any = None) -> None:
        empty = isinstance(config_list, Sequence) and not isinstance(config_list, (str, bytes)) and not config_list
        super().__init__(model, DEFAULT_CONFIG_LIST if config_list is None or empty else config_list, optimizer,
                         dummy_input)

    def _init_wrapper(self, wrapper: QuantizerModuleWrapper) -> None:
        """The per-layer scale (grows with the weights' range) and the fixed middle zero point."""
        bits = wrapper.bits(QuantType.WEIGHT)
        wrapper.register_buffer("weight_scale", torch.zeros(1, device=self.device))
        wrapper.register_buffer("weight_zero_point", torch.full((1,), float(2 ** (bits - 1)), device=self.device))

    def quantize_weight(self, weight: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """Round the weight to the layer's symmetric grid."""
        bits = wrapper.bits(QuantType.WEIGHT)
        detached = weight.detach()
        scale, _ = symmetric_qparams(detached.min().reshape(1), detached.max().reshape(1), bits)
        wrapper.weight_scale.copy_(torch.maximum(wrapper.weight_scale, scale))
        return fake_quantize(weight, wrapper.weight_scale, wrapper.weight_zero_point, bits)
