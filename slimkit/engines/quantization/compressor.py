"""The ``Quantizer`` base class: quantization dispatch, the step hook, calibration export, freezing."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from slimkit.core.coverage import coverage
from slimkit.core.io import save_tensors_atomic
from slimkit.core.weights import CONV1D, DENSE, EXCLUDED, find_targets
from slimkit.engines._compressor import Compressor
from slimkit.engines.quantization.config import QuantizationConfigError, resolve_quant_config_list
from slimkit.engines.quantization.frozen import QuantizedLayer
from slimkit.engines.quantization.grad import QuantGrad, QuantType
from slimkit.engines.quantization.io import CALIBRATION_FORMAT, MODEL_FORMAT, Calibration, save_calibration
from slimkit.engines.quantization.observers import code_range, dequantize, quantize_codes
from slimkit.engines.quantization.wrapper import QuantizerModuleWrapper
from slimkit.utils import model_device


class Quantizer(Compressor[QuantizerModuleWrapper]):
    """Base quantizer: wraps the layers ``config_list`` selects and quantizes them in ``forward``.

    Subclasses override :meth:`quantize_weight`, :meth:`quantize_input` and/or :meth:`quantize_output`
    (each returns the quantized-then-dequantized tensor and records its affine parameters on the wrapper as
    ``<type>_scale`` / ``<type>_zero_point``), and may set these class attributes: ``quant_grad`` (the
    :class:`QuantGrad` subclass whose backward replaces rounding's gradient; ``None`` when the ``quantize_*``
    methods are differentiable themselves), ``supported_quant_types``, ``bits_range``, ``default_op_types``
    (what ``op_types: ["default"]`` means) and ``extra_config_keys``. ``_init_wrapper`` registers per-layer
    buffers or parameters before the model is wrapped.

    The ``quantize_*`` methods receive ``(tensor, wrapper)``; NNI's oldest guide names the second argument
    ``config``, which is ``wrapper.config`` here. ``optimizer.step()`` is patched to call :meth:`step`.
    """

    wrapper_class = QuantizerModuleWrapper
    config_error = QuantizationConfigError
    role = "quantizer"
    quant_grad: type[QuantGrad] | None = QuantGrad
    supported_quant_types: tuple[str, ...] = ("weight", "input", "output")
    bits_range: tuple[int, int] = (1, 16)
    default_op_types: tuple[str, ...] = ("Conv2d", "Linear", "Conv1D")
    extra_config_keys: tuple[str, ...] = ()
    #: the :mod:`slimkit.core.weights` target kinds whose weights the wrappers can quantize
    _weight_kinds: tuple[str, ...] = DENSE

    def _init_state(self) -> None:
        self.steps = 0
        #: where new wrapper state is created: the model's device (its first parameter or buffer)
        self.device = model_device(self.bound_model)
        self.epoch = 0

    def _create_wrappers(self) -> list[QuantizerModuleWrapper]:
        self._targets = find_targets(self.bound_model)  # before wrapping: what coverage() is measured against
        resolved = resolve_quant_config_list(
            self.bound_model, self.config_list, self.default_op_types, self.supported_quant_types, self.bits_range,
            self.extra_config_keys,
        )
        wrappers = [
            QuantizerModuleWrapper(self.bound_model.get_submodule(name), name, cfg["op_type"], cfg, self)
            for name, cfg in resolved.items()
        ]
        for wrapper in wrappers:
            self._init_wrapper(wrapper)
        return wrappers

    def _buffer_device(self, wrapper: QuantizerModuleWrapper) -> torch.device:
        return self.device

    # --- hooks for subclasses ------------------------------------------------------------------------
    def _init_wrapper(self, wrapper: QuantizerModuleWrapper) -> None:
        """Register a wrapper's buffers/parameters (called once per wrapper, before the model is wrapped)."""

    def quantize_weight(self, weight: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """Return the quantized weight of ``wrapper``'s layer (default: unchanged)."""
        return weight

    def quantize_input(self, inputs: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """Return the quantized first input of ``wrapper``'s layer (default: unchanged)."""
        return inputs

    def quantize_output(self, output: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """Return the quantized output of ``wrapper``'s layer (default: unchanged)."""
        return output

    def activation_qparams(
        self, wrapper: QuantizerModuleWrapper, quant_type: QuantType
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The ``(scale, zero_point)`` an input/output is quantized with now; ``None`` before calibration."""
        scale, zero_point = wrapper.qparams(quant_type)
        return None if scale is None or zero_point is None else (scale, zero_point)

    def step(self) -> None:
        """Called after every ``optimizer.step()`` (or by you when no optimizer was given); counts steps."""
        self.steps += 1

    def update_epoch(self, epoch: int) -> None:
        """Tell the quantizer that epoch ``epoch`` starts (epoch-scheduled quantizers override this)."""
        self.epoch = int(epoch)

    # --- quantization dispatch ----------------------------------------------------------------------
    def dispatch(self, tensor: torch.Tensor, quant_type: QuantType, wrapper: QuantizerModuleWrapper) -> torch.Tensor:
        """Call the ``quantize_*`` method for ``quant_type``."""
        if quant_type is QuantType.WEIGHT:
            return self.quantize_weight(tensor, wrapper)
        if quant_type is QuantType.INPUT:
            return self.quantize_input(tensor, wrapper)
        return self.quantize_output(tensor, wrapper)

    def quantize(self, tensor: torch.Tensor, quant_type: QuantType, wrapper: QuantizerModuleWrapper) -> torch.Tensor:
        """Quantize ``tensor`` through ``quant_grad`` (or directly when it is ``None``); wrappers call this."""
        if self.quant_grad is None:
            return self.dispatch(tensor, quant_type, wrapper)
        return self.quant_grad.apply(tensor, quant_type, wrapper)

    def _on_optimizer_step(self) -> None:
        """After each ``optimizer.step()``: call :meth:`step`."""
        self.step()

    # --- results ------------------------------------------------------------------------------------
    @torch.no_grad()
    def quantized_weight(self, wrapper: QuantizerModuleWrapper) -> torch.Tensor:
        """The layer's weight as the forward pass uses it (quantized then dequantized), detached."""
        return self.dispatch(wrapper.layer_weight(), QuantType.WEIGHT, wrapper).detach()

    @torch.no_grad()
    def weight_codes(self, wrapper: QuantizerModuleWrapper) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(codes, scale, zero_point)`` of the layer's quantized weight; ``dequantize`` of them gives it back."""
        weight = self.quantized_weight(wrapper)
        scale, zero_point = wrapper.qparams(QuantType.WEIGHT)
        if scale is None or zero_point is None:
            raise QuantizationConfigError(
                f"{type(self).__name__} records no weight scale for layer {wrapper.name!r}; its quantize_weight "
                "must set wrapper.weight_scale and wrapper.weight_zero_point."
            )
        return quantize_codes(weight, scale, zero_point, wrapper.bits("weight")), scale.clone(), zero_point.clone()

    def coverage(self) -> dict[str, Any]:
        """The :func:`slimkit.core.coverage.coverage` record of the weights this quantizer quantizes.

        Measured against the Linear-like layers of the model as it was given; a layer the ``config_list`` does not
        select is listed as excluded, one the target definition refuses with its reason.
        """
        done = [w.name for w in self.modules_wrapper if QuantType.WEIGHT in w.quant_types]
        left = {t.name: f"{EXCLUDED} (config_list does not select it)" for t in self._targets
                if t.name not in done and not t.unsupported and t.kind in self._weight_kinds}
        return coverage(self._targets, done, reasons=left)

    def calibration_config(self) -> Calibration:
        """``{layer: {"<type>_bits": int, "<type>_scale": Tensor, "<type>_zero_point": Tensor}}`` for every type.

        Inputs and outputs also get NNI 2.x's ``tracked_min_<type>`` / ``tracked_max_<type>`` (floats): the
        interval their codes cover.

        Weight parameters are computed from the current weights; activation parameters are the current
        observer / learned values (run training or calibration batches first).
        """
        result: Calibration = {}
        for wrapper in self.modules_wrapper:
            entry: dict[str, Any] = {}
            for quant_type in wrapper.quant_types:
                if quant_type is QuantType.WEIGHT:
                    _, scale, zero_point = self.weight_codes(wrapper)
                else:
                    qparams = self.activation_qparams(wrapper, quant_type)
                    if qparams is None:
                        continue
                    scale, zero_point = qparams
                entry[f"{quant_type}_bits"] = wrapper.bits(quant_type)
                entry[f"{quant_type}_scale"] = scale.detach().clone()
                entry[f"{quant_type}_zero_point"] = zero_point.detach().clone()
                if quant_type is not QuantType.WEIGHT:  # NNI 2.x's keys: the range the codes cover
                    low, high = code_range(scale, zero_point, wrapper.bits(quant_type))
                    entry[f"tracked_min_{quant_type}"], entry[f"tracked_max_{quant_type}"] = low, high
            result[wrapper.name] = entry
        return result

    def quantized_state_dict(self) -> dict[str, torch.Tensor]:
        """State dict of the unwrapped model with every quantized weight replaced by its dequantized value."""
        state = self._unwrapped_state_dict()
        for wrapper in self.modules_wrapper:
            if QuantType.WEIGHT in wrapper.quant_types:
                codes, scale, zero_point = self.weight_codes(wrapper)
                key = f"{wrapper.name}.weight"
                weight = dequantize(codes, scale, zero_point)
                state[key] = (weight.t() if wrapper.kind == CONV1D else weight).to(state[key].dtype)
        return state

    def export_model(
        self,
        model_path: str | os.PathLike,
        calibration_path: str | os.PathLike | None = None,
        onnx_path: str | os.PathLike | None = None,
        input_shape: Sequence[int] | None = None,
        device: torch.device | str | None = None,
    ) -> Calibration:
        """Write the dequantized weights and (optionally) scales / zero points / bits as safetensors, atomically.

        ``model_path`` holds a plain state dict of the unwrapped model (load it with ``load_state_dict_file``);
        ``calibration_path`` the :meth:`calibration_config` (read it with ``load_calibration``). The ONNX graph
        (float, dequantized weights) needs ``input_shape`` or the quantizer's ``dummy_input``. ``device`` (NNI's
        argument) is where the graph is traced; an ONNX file does not depend on it, so a CUDA device on a machine
        without one falls back to the CPU with a warning. Returns the calibration config.
        """
        if device is not None and str(device).startswith("cuda") and not torch.cuda.is_available():
            warnings.warn(f"export_model(device={str(device)!r}): no CUDA device here; the ONNX graph is traced on "
                          "the CPU (the file is the same).", UserWarning, stacklevel=2)
        calibration = self.calibration_config()
        state = self.quantized_state_dict()
        save_tensors_atomic(state, model_path, MODEL_FORMAT)
        if calibration_path is not None:
            save_calibration(calibration, calibration_path, CALIBRATION_FORMAT)
        if onnx_path is not None:
            self._export_onnx(onnx_path, input_shape, state)
        return calibration

    def freeze(self) -> nn.Module:
        """Replace every wrapper by a :class:`QuantizedLayer` holding integer weight codes and fixed scales.

        The frozen model no longer trains its quantization and its state dict stores weights as 8-bit (or
        wider) codes. The optimizer hook is removed. Returns the model.
        """
        self.restore_optimizer()
        self._wrap_model()
        for wrapper in self.modules_wrapper:
            self.bound_model.set_submodule(wrapper.name, QuantizedLayer.from_wrapper(wrapper))
        self.is_wrapped = False
        self.modules_wrapper = []
        return self.bound_model
