"""NNI's ``ObserverQuantizer``: post-training quantization from ranges observed on calibration batches.

``quantizer = ObserverQuantizer(model.eval(), config_list)``; run calibration batches through ``model`` (the
outputs are unchanged while it observes); ``quantizer.compress()`` fixes every scale and zero point and from
then on the model computes with fake-quantized weights, inputs and outputs; ``export_model(...)`` writes them.
"""

from __future__ import annotations

import torch

from slimkit.engines.quantization.compressor import Quantizer
from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.engines.quantization.grad import QuantType
from slimkit.engines.quantization.observers import affine_qparams, fake_quantize, symmetric_qparams
from slimkit.engines.quantization.wrapper import QuantizerModuleWrapper


class ObserverQuantizer(Quantizer):
    """Observe min/max while calibration batches run, then quantize with fixed parameters after :meth:`compress`.

    Weights get a symmetric per-tensor grid, inputs and outputs an affine per-tensor grid over the observed
    range (NNI's defaults: qint8 weights, quint8 activations). No training: the quantize-dequantize has no
    gradient path (``quant_grad`` is ``None`` and the model should stay in eval mode).
    """

    quant_grad = None
    default_op_types = ("Conv2d", "Linear")

    def _init_state(self) -> None:
        super()._init_state()
        self.compressed = False

    def _init_wrapper(self, wrapper: QuantizerModuleWrapper) -> None:
        """Running min/max per quantized tensor, and its (later fixed) scale and zero point."""
        for quant_type in wrapper.quant_types:
            name = quant_type.value
            wrapper.register_buffer(f"{name}_observed_min", torch.full((1,), float("inf"), device=self.device))
            wrapper.register_buffer(f"{name}_observed_max", torch.full((1,), float("-inf"), device=self.device))
            wrapper.register_buffer(f"{name}_scale", torch.ones(1, device=self.device))
            wrapper.register_buffer(f"{name}_zero_point", torch.zeros(1, device=self.device))

    def quantize(self, tensor: torch.Tensor, quant_type: QuantType, wrapper: QuantizerModuleWrapper) -> torch.Tensor:
        """Before :meth:`compress`: record the range and pass ``tensor`` through; after: fake-quantize it."""
        name = quant_type.value
        if not self.compressed:
            with torch.no_grad():
                low = getattr(wrapper, f"{name}_observed_min")
                high = getattr(wrapper, f"{name}_observed_max")
                low.copy_(torch.minimum(low, tensor.detach().min().float()))
                high.copy_(torch.maximum(high, tensor.detach().max().float()))
            return tensor
        return fake_quantize(tensor, getattr(wrapper, f"{name}_scale"), getattr(wrapper, f"{name}_zero_point"),
                             wrapper.bits(quant_type))

    @torch.no_grad()
    def compress(self) -> torch.nn.Module:
        """Fix every scale and zero point from the observed ranges; the model quantizes from now on."""
        for wrapper in self.modules_wrapper:
            if "weight" in wrapper.config["quant_types"] and not torch.isfinite(wrapper.weight_observed_min).all():
                self.quantize(wrapper.module.weight, QuantType.WEIGHT, wrapper)  # weights need no batch
            for quant_type in wrapper.quant_types:
                name = quant_type.value
                low, high = getattr(wrapper, f"{name}_observed_min"), getattr(wrapper, f"{name}_observed_max")
                if not torch.isfinite(low).all():
                    raise QuantizationConfigError(
                        f"ObserverQuantizer saw no {name} of layer {wrapper.name!r}: run calibration batches "
                        "through the model (model(x) under torch.no_grad()) before compress().")
                qparams = symmetric_qparams if quant_type is QuantType.WEIGHT else affine_qparams
                scale, zero_point = qparams(low, high, wrapper.bits(quant_type))
                getattr(wrapper, f"{name}_scale").copy_(scale)
                getattr(wrapper, f"{name}_zero_point").copy_(zero_point)
        self.compressed = True
        return self.bound_model

    def activation_qparams(self, wrapper: QuantizerModuleWrapper,
                           quant_type: QuantType) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The fixed parameters after :meth:`compress` (``None`` before)."""
        return super().activation_qparams(wrapper, quant_type) if self.compressed else None

    def quantize_weight(self, weight: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: object) -> torch.Tensor:
        """The weight on its fixed symmetric grid (used by exports)."""
        return fake_quantize(weight, wrapper.weight_scale, wrapper.weight_zero_point, wrapper.bits(QuantType.WEIGHT))
