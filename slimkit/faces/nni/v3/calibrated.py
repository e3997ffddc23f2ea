"""NNI 3.0's base ``Quantizer``: simulated quantization from a calibration config another quantizer produced.

``nni.compression.base.compressor.Quantizer(model, config_list)`` wraps the layers a 3.0 ``config_list`` selects
and quantizes nothing until ``update_calibration_config(calibration_config)`` gives the scales and zero points
(NNI 3.0's ``{layer: {"weight" | "_input_0" | "_output_0": {"scale", "zero_point", "quant_bits", "quant_dtype",
"quant_scheme", ...}}}``, e.g. ``QATQuantizer.get_calibration_config()`` after a speedup trimmed its channels, as
NNI 3.0's fusion example does); from then on those targets are fake-quantized with them. Scales may be per tensor,
per output channel of a weight (``[C, 1, ...]``) or per channel of an input / output (``[1, C, 1, ...]``).
Slimkit's name of the class is :class:`CalibrationQuantizer`; ``slimkit.compression.base.compressor.Quantizer``
is NNI's name for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.compressor import Quantizer as EngineQuantizer
from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.engines.quantization.grad import QuantType
from slimkit.engines.quantization.io import Calibration
from slimkit.engines.quantization.observers import fake_quantize
from slimkit.engines.quantization.wrapper import QuantizerModuleWrapper
from slimkit.errors import closest
from slimkit.faces.nni.v3.evaluator import Evaluator
from slimkit.faces.nni.v3.quant_face import CalibrationV3, V3Quantizer, signed_offset

__all__ = ["CalibrationQuantizer"]

_TYPES = {"weight": QuantType.WEIGHT, "_input_0": QuantType.INPUT, "_output_0": QuantType.OUTPUT}


class CalibrationQuantizer(V3Quantizer, EngineQuantizer):
    """NNI 3.0's ``Quantizer(model, config_list, evaluator=None)``: fixed grids set by ``update_calibration_config``.

    ``config_list`` takes NNI 3.0's keys (:mod:`slimkit.faces.nni.v3.quant_config`), with per-channel
    granularity for weights (``out_channel``) and for inputs and outputs (``per_channel``). Each target is passed
    through until its calibration is given. The quantize-dequantize has no gradient path (a simulation).
    """

    quant_grad = None
    default_op_types = ("Conv2d", "Linear")
    v3_channel_activations = True
    v3_channel_weights = True

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], evaluator: Evaluator | None = None,
                 existed_wrappers: Any = None) -> None:
        if existed_wrappers is not None:
            raise QuantizationConfigError("Quantizer(existed_wrappers=...) is NNI's internal argument of "
                                          "from_compressor; build it on a model no other compressor wraps.")
        self._given: set[tuple[str, str]] = set()
        translated = self._v3_config(model, config_list, evaluator, optional=True)
        EngineQuantizer.__init__(self, model, translated)

    def _init_wrapper(self, wrapper: QuantizerModuleWrapper) -> None:
        """A scale and zero point per quantized tensor (shaped by the calibration config when it comes)."""
        for quant_type in wrapper.quant_types:
            wrapper.register_buffer(f"{quant_type.value}_scale", torch.ones(1, device=self.device))
            wrapper.register_buffer(f"{quant_type.value}_zero_point", torch.zeros(1, device=self.device))

    def _fixed(self, tensor: torch.Tensor, quant_type: QuantType, wrapper: QuantizerModuleWrapper) -> torch.Tensor:
        name = quant_type.value
        if (wrapper.name, name) not in self._given:
            return tensor
        scale, zero_point = getattr(wrapper, f"{name}_scale"), getattr(wrapper, f"{name}_zero_point")
        channels = scale.shape[0] if quant_type is QuantType.WEIGHT else scale.shape[1] if scale.dim() > 1 else 1
        dim = 0 if quant_type is QuantType.WEIGHT else 1
        if scale.numel() > 1 and (tensor.dim() <= dim or tensor.shape[dim] != channels):
            raise QuantizationConfigError(f"Layer {wrapper.name!r}: its {name} has shape {tuple(tensor.shape)} but "
                                          f"the calibration config gives {channels} channel scales (dim {dim}); "
                                          "trim the config to the channels a speedup kept.")
        return fake_quantize(tensor, scale, zero_point, wrapper.bits(quant_type))

    def quantize_weight(self, weight: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """The weight on its calibrated grid (unchanged before its calibration is given)."""
        return self._fixed(weight, QuantType.WEIGHT, wrapper)

    def quantize_input(self, inputs: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """The input on its calibrated grid (unchanged before its calibration is given)."""
        return self._fixed(inputs, QuantType.INPUT, wrapper)

    def quantize_output(self, output: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """The output on its calibrated grid (unchanged before its calibration is given)."""
        return self._fixed(output, QuantType.OUTPUT, wrapper)

    def activation_qparams(self, wrapper: QuantizerModuleWrapper,
                           quant_type: QuantType) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The given grid of an input / output; ``None`` before its calibration is given."""
        if (wrapper.name, quant_type.value) not in self._given:
            return None
        return super().activation_qparams(wrapper, quant_type)

    def calibration_config(self) -> Calibration:
        """The engine's calibration config of the targets whose calibration was given."""
        out: Calibration = {}
        for layer, entry in super().calibration_config().items():
            kept = {k: v for k, v in entry.items() if any((layer, t) in self._given and t in k
                                                          for t in ("weight", "input", "output"))}
            if kept:
                out[layer] = kept
        return out

    def quantized_state_dict(self) -> dict[str, torch.Tensor]:
        """The engine's export state; every quantized weight needs its calibration first."""
        missing = [w.name for w in self.modules_wrapper
                   if QuantType.WEIGHT in w.quant_types and (w.name, "weight") not in self._given]
        if missing:
            raise QuantizationConfigError(f"No weight calibration was given for {', '.join(missing)}: call "
                                          "update_calibration_config(...) with them before exporting.")
        return super().quantized_state_dict()

    def compress(self, max_steps: int | None = None,  # type: ignore[override]
                 max_epochs: int | None = None) -> tuple[nn.Module, CalibrationV3]:
        """Nothing to learn: ``(model, calibration_config)`` (through the evaluator's chain when one is given)."""
        if self.evaluator is not None and (max_steps is not None or max_epochs is not None):
            self._run_chain(max_steps, max_epochs)
        return self.bound_model, self.get_calibration_config()

    def _fuse_preprocess(self, evaluator: Evaluator) -> None:
        """In a chain: the wrapped layers simulate their given grids while the others train."""
        self._wrap_model()

    def update_calibration_config(self, calibration_config: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
        """Set the scales and zero points of the targets ``calibration_config`` lists (NNI 3.0's format).

        Each layer must be one this quantizer wraps and each target one its ``config_list`` quantizes, with the
        same ``quant_bits``, ``quant_dtype`` and ``quant_scheme``; zero points are NNI 3.0's (signed for ``int``).
        """
        wrappers = {w.name: w for w in self.modules_wrapper}
        if not isinstance(calibration_config, Mapping):
            raise QuantizationConfigError(f"update_calibration_config takes {{layer: {{target: {{'scale', "
                                          f"'zero_point', ...}}}}}}, got {type(calibration_config).__name__}.")
        for layer, targets in calibration_config.items():
            if layer not in wrappers:
                raise QuantizationConfigError(f"update_calibration_config: {layer!r} is not a layer this Quantizer "
                                              f"quantizes.{closest(str(layer), list(wrappers))}")
            for target, info in targets.items():
                self._set_target(wrappers[layer], str(target), info)

    def _set_target(self, wrapper: QuantizerModuleWrapper, target: str, info: Mapping[str, Any]) -> None:
        where = f"update_calibration_config[{wrapper.name!r}][{target!r}]"
        quant_type = _TYPES.get(target)
        if quant_type is None or quant_type not in wrapper.quant_types:
            listed = [t for t, q in _TYPES.items() if q in wrapper.quant_types]
            raise QuantizationConfigError(f"{where}: the config_list quantizes {', '.join(listed)} of this layer; "
                                          f"{target!r} is not among them.")
        bits, given = wrapper.bits(quant_type), self._v3_settings.get(wrapper.name, {}).get(quant_type.value, {})
        for key, expected in (("quant_bits", bits), ("quant_dtype", given.get("quant_dtype")),
                              ("quant_scheme", given.get("quant_scheme"))):
            if key in info and info[key] is not None and info[key] != expected:
                raise QuantizationConfigError(f"{where}: {key} is {info[key]!r} but this Quantizer's config_list "
                                              f"gives {expected!r}; build it with the config_list the calibration "
                                              "came from.")
        if "scale" not in info or "zero_point" not in info:
            raise QuantizationConfigError(f"{where} needs 'scale' and 'zero_point'.")
        scale = torch.as_tensor(info["scale"], dtype=torch.float32, device=self.device)
        zero_point = torch.as_tensor(info["zero_point"], dtype=torch.float32, device=self.device)
        if scale.shape != zero_point.shape:
            raise QuantizationConfigError(f"{where}: scale {tuple(scale.shape)} and zero_point "
                                          f"{tuple(zero_point.shape)} differ in shape.")
        zero_point = zero_point + signed_offset(str(given.get("quant_dtype", "int")), bits)
        setattr(wrapper, f"{quant_type.value}_scale", scale.reshape(scale.shape or (1,)))
        setattr(wrapper, f"{quant_type.value}_zero_point", zero_point.reshape(zero_point.shape or (1,)))
        self._given.add((wrapper.name, quant_type.value))
