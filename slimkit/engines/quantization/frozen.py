"""Frozen quantized layers: integer weight codes plus fixed scales, the form a trained quantizer ends in.

:meth:`Quantizer.freeze` swaps every wrapper for a :class:`QuantizedLayer`. Its state dict holds the weight
as integer codes (``uint8`` up to 8 bits), the scales and zero points, and the layer's other tensors (bias);
the forward dequantizes the weight and fake-quantizes input/output with the frozen parameters. Because the
state is tensors only, a frozen model saves as safetensors; :func:`quantized_layer_specs` and
:func:`rebuild_quantized_layers` let a loader recreate the empty structure so the saved state loads strictly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.core.weights import CONV1D, target_kind
from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.engines.quantization.grad import QuantType
from slimkit.engines.quantization.observers import dequantize, fake_quantize
from slimkit.engines.quantization.wrapper import QuantizerModuleWrapper, quantized_forward
from slimkit.utils import model_device

LayerSpec = dict[str, Any]  # {"bits": {type: int}, "shapes": {buffer: [dims]}, "dtype": str}


class QuantizedLayer(nn.Module):
    """A layer whose quantization is fixed: weight stored as integer codes, activations with frozen scales.

    Build it with :meth:`from_wrapper` (from a trained quantizer) or empty from a spec (to load a saved one).
    """

    def __init__(self, module: nn.Module, name: str, spec: LayerSpec) -> None:
        super().__init__()
        self.name = name
        self.bits = {str(k): int(v) for k, v in spec["bits"].items()}
        dtype = getattr(torch, str(spec.get("dtype", "float32")), None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise QuantizationConfigError(
                f"Quantized layer {name!r} has weight dtype {spec.get('dtype')!r}; expected a floating dtype name "
                "such as 'float32'."
            )
        self.weight_dtype = dtype
        shapes = spec["shapes"]
        device = model_device(module)
        #: the layer's target kind, read before its weight goes: a Conv1D's codes are stored ``[out, in]``
        self.kind = target_kind(module)
        if "weight" in self.bits:
            if "weight" not in module._parameters:
                raise QuantizationConfigError(f"Layer {name!r} ({type(module).__name__}) has no weight parameter.")
            weight = module._parameters.pop("weight")
            shape = weight.shape[::-1] if self.kind == CONV1D else weight.shape
            codes_dtype = torch.uint8 if self.bits["weight"] <= 8 else torch.int32  # codes up to 8 bits: uint8
            codes = torch.zeros(shape, dtype=codes_dtype, device=device)
            self.register_buffer("weight_codes", codes)
        self.module = module
        for quant_type in self.bits:
            for field in ("scale", "zero_point"):
                key = f"{quant_type}_{field}"
                self.register_buffer(key, torch.zeros(shapes[key], dtype=torch.float32, device=device))

    @classmethod
    def from_wrapper(cls, wrapper: QuantizerModuleWrapper) -> QuantizedLayer:
        """Freeze a quantizer wrapper's current state (weights are re-quantized once, here)."""
        quantizer, module = wrapper.quantizer, wrapper.module
        values: dict[str, torch.Tensor] = {}
        for quant_type in wrapper.quant_types:
            if quant_type is QuantType.WEIGHT:
                codes, scale, zero_point = quantizer.weight_codes(wrapper)
                values["weight_codes"] = codes
            else:
                qparams = quantizer.activation_qparams(wrapper, quant_type)
                if qparams is None:
                    raise QuantizationConfigError(
                        f"Layer {wrapper.name!r} has no {quant_type} scale yet; run training or calibration batches "
                        "through the model (in train mode) before freeze()."
                    )
                scale, zero_point = qparams
            values[f"{quant_type}_scale"] = scale
            values[f"{quant_type}_zero_point"] = zero_point
        weight = getattr(module, "weight", None)
        dtype = str(weight.dtype).split(".")[-1] if isinstance(weight, torch.Tensor) else "float32"
        spec = {
            "bits": {str(t): wrapper.bits(t) for t in wrapper.quant_types},
            "shapes": {k: list(v.shape) for k, v in values.items() if k != "weight_codes"},
            "dtype": dtype,
        }
        layer = cls(module, wrapper.name, spec)
        with torch.no_grad():
            for key, value in values.items():
                target = getattr(layer, key)
                target.copy_(value.to(device=target.device, dtype=target.dtype))
        return layer.to(next(iter(values.values())).device)  # parameter-free layers: follow the quantizer's state

    def spec(self) -> LayerSpec:
        """JSON-able description that rebuilds this layer's empty structure (see :func:`rebuild_quantized_layers`)."""
        shapes = {
            f"{t}_{f}": list(getattr(self, f"{t}_{f}").shape) for t in self.bits for f in ("scale", "zero_point")
        }
        return {"bits": dict(self.bits), "shapes": shapes, "dtype": str(self.weight_dtype).split(".")[-1]}

    def dequantized_weight(self) -> torch.Tensor:
        """The weight the forward uses: ``(codes - zero_point) * scale``, ``[out, in]`` (also for a Conv1D)."""
        return dequantize(self.weight_codes, self.weight_scale, self.weight_zero_point).to(self.weight_dtype)

    def weight(self) -> torch.Tensor:
        """The layer's effective weight (dequantized), like ``torch.ao`` quantized modules' ``weight()``."""
        return self.dequantized_weight() if "weight" in self.bits else self.module.weight

    def _act(self, x: torch.Tensor, quant_type: str) -> torch.Tensor:
        return fake_quantize(x, getattr(self, f"{quant_type}_scale"), getattr(self, f"{quant_type}_zero_point"),
                             self.bits[quant_type])

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Fake-quantize the input, run the layer on the dequantized weight, fake-quantize the output."""
        return quantized_forward(self.module, self.kind, self.bits, args, kwargs, self._act, self.dequantized_weight)

    def extra_repr(self) -> str:
        """Show the layer name and bit widths."""
        return f"name={self.name!r}, bits={self.bits}"


def quantized_layer_specs(model: nn.Module) -> dict[str, LayerSpec]:
    """``{layer name: spec}`` for every :class:`QuantizedLayer` in ``model`` (JSON-able; for replay)."""
    return {name: m.spec() for name, m in model.named_modules() if isinstance(m, QuantizedLayer)}


def rebuild_quantized_layers(model: nn.Module, specs: Mapping[str, LayerSpec]) -> nn.Module:
    """Wrap the named layers of a fresh ``model`` in empty :class:`QuantizedLayer` s (load the state dict next)."""
    layer_names = {name for name, _ in model.named_modules() if name}
    for name, spec in specs.items():
        if name not in layer_names:
            raise QuantizationConfigError(
                f"Cannot rebuild quantized layer {name!r}: the model has no such layer. Pass the architecture "
                "that was quantized."
            )
        model.set_submodule(name, QuantizedLayer(model.get_submodule(name), name, spec))
    return model
