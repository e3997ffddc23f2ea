"""Learned step size quantization (Esser et al., 2020; NNI's ``LsqQuantizer``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.compressor import Quantizer
from slimkit.engines.quantization.grad import QuantType, grad_scale, round_ste
from slimkit.engines.quantization.observers import qmax_for
from slimkit.engines.quantization.wrapper import QuantizerModuleWrapper


class LsqEngine(Quantizer):
    """LSQ: a uniform quantizer whose step size ``s`` is a trained parameter, one per layer and tensor type.

    ``x_hat = round(clamp(x / s, -Q_N, Q_P)) * s`` with a straight-through round, so the loss trains ``s``
    as well as the weights; the step's gradient is scaled by ``1 / sqrt(N * Q_P)`` as in the paper. Weights
    are signed (``Q_N = 2**(b-1)``, ``Q_P = 2**(b-1) - 1``) and start at ``s = 2 mean|w| / sqrt(Q_P)``.
    Inputs and outputs are initialised the same way from their first training batch, and are unsigned
    (``[0, 2**b - 1]``) when that batch has no negative values (e.g. after ReLU). In the affine form the
    zero point is ``Q_N`` (0 for unsigned).

    The step sizes are ``nn.Parameter`` s named ``<type>_scale`` on each wrapper; when an optimizer is
    given they are added to it as a new parameter group (without weight decay). Otherwise add
    :meth:`parameters` to your optimizer yourself.
    """

    user_name = "LsqQuantizer"  # NNI's name for it (slimkit.faces.nni: 2.x and 3.0 signatures)

    quant_grad = None
    bits_range = (2, 16)

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
    ) -> None:
        super().__init__(model, config_list, optimizer, dummy_input)
        if optimizer is not None:
            optimizer.add_param_group({"params": self.parameters(), "weight_decay": 0.0})

    def parameters(self) -> list[nn.Parameter]:
        """The learned step sizes of every wrapped layer."""
        return [
            getattr(w, f"{t.value}_scale") for w in self.modules_wrapper for t in w.quant_types
        ]

    def _init_wrapper(self, wrapper: QuantizerModuleWrapper) -> None:
        """Create the step parameter, zero point and initialised flag for every quantized tensor."""
        weight = wrapper.layer_weight() if "weight" in wrapper.config["quant_types"] else None
        device = self.device
        for quant_type in wrapper.quant_types:
            name, bits = quant_type.value, wrapper.bits(quant_type)
            zero_point = float(2 ** (bits - 1))
            step, ready = 1.0, 0
            if quant_type is QuantType.WEIGHT:
                step = self._initial_step(weight, 2 ** (bits - 1) - 1)
                ready = 1
            wrapper.register_parameter(f"{name}_scale", nn.Parameter(torch.full((1,), step, device=device)))
            wrapper.register_buffer(f"{name}_zero_point", torch.full((1,), zero_point, device=device))
            wrapper.register_buffer(f"{name}_initialized", torch.tensor(ready, device=device))

    @staticmethod
    def _initial_step(x: torch.Tensor, qp: int) -> float:
        return max(2 * float(x.detach().abs().mean()) / math.sqrt(qp), 1e-8)

    def _quantize(self, x: torch.Tensor, wrapper: QuantizerModuleWrapper, quant_type: QuantType) -> torch.Tensor:
        name, bits = quant_type.value, wrapper.bits(quant_type)
        step, zero_point = getattr(wrapper, f"{name}_scale"), getattr(wrapper, f"{name}_zero_point")
        initialized = getattr(wrapper, f"{name}_initialized")
        if not bool(initialized):
            if not wrapper.training:
                return x  # nothing learned yet: pass through until the first training batch
            with torch.no_grad():
                signed = bool(x.detach().min() < 0)
                zero_point.fill_(float(2 ** (bits - 1)) if signed else 0.0)
                qp = 2 ** (bits - 1) - 1 if signed else qmax_for(bits)
                step.fill_(self._initial_step(x, qp))
                initialized.fill_(1)
        qmax = qmax_for(bits)
        qp = qmax - float(zero_point)
        features = x.numel() if quant_type is QuantType.WEIGHT else max(x[0].numel(), 1)
        s = grad_scale(step, 1.0 / math.sqrt(features * qp))
        codes = round_ste(torch.clamp(x / s + zero_point, 0, qmax))
        return ((codes - zero_point) * s).to(x.dtype)

    def activation_qparams(
        self, wrapper: QuantizerModuleWrapper, quant_type: QuantType
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The learned step and zero point; ``None`` before the first training batch initialised them."""
        if not bool(getattr(wrapper, f"{quant_type.value}_initialized")):
            return None
        return super().activation_qparams(wrapper, quant_type)

    def quantize_weight(self, weight: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """Signed LSQ quantization of the weight with its learned step."""
        return self._quantize(weight, wrapper, QuantType.WEIGHT)

    def quantize_input(self, inputs: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """LSQ quantization of the input (signedness fixed at the first training batch)."""
        return self._quantize(inputs, wrapper, QuantType.INPUT)

    def quantize_output(self, output: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """LSQ quantization of the output (signedness fixed at the first training batch)."""
        return self._quantize(output, wrapper, QuantType.OUTPUT)

    def step(self) -> None:
        """Count the step and keep every learned step size positive (what a subclass adds may take any sign)."""
        super().step()
        with torch.no_grad():
            for param in LsqEngine.parameters(self):
                param.clamp_(min=1e-8)
