"""LSQ+: learned step size and learned offset for activations (Bhalgat et al., 2020; NNI 3.0's ``LsqPlusQuantizer``)."""

from __future__ import annotations

import math

import torch
from torch import nn

from slimkit.engines.quantization.grad import QuantType, grad_scale, round_ste
from slimkit.engines.quantization.lsq import LsqEngine
from slimkit.engines.quantization.observers import qmax_for
from slimkit.engines.quantization.wrapper import QuantizerModuleWrapper

__all__ = ["LsqPlusEngine"]


class LsqPlusEngine(LsqEngine):
    """LSQ+: LSQ whose activations get a trained offset ``beta`` as well as a trained step ``s``.

    Activations (inputs, outputs) are quantized asymmetrically, ``x_hat = round(clamp((x - beta) / s, 0,
    2**b - 1)) * s + beta``, so a layer whose activations are not centred on zero (Swish, a ReLU6 with a bias
    shift) keeps its whole code range; ``s`` and ``beta`` start from the first training batch's range (``s =
    (max - min) / (2**b - 1)``, ``beta = min``) and both train through a straight-through round, the step's
    gradient scaled as in LSQ. Weights are symmetric as in LSQ, with the paper's initial step
    ``max(|mu - 3 sigma|, |mu + 3 sigma|) / 2**(b-1)``. The offsets are ``nn.Parameter`` s named
    ``<type>_offset``; :meth:`parameters` lists them with the steps. The exported zero point of an activation
    is ``-beta / s`` rounded onto the code range (the learned offset to within half a step).
    """

    user_name = "LsqPlusQuantizer"  # NNI 3.0's name for it (slimkit.faces.nni.v3.quantizers)

    def parameters(self) -> list[nn.Parameter]:
        """The learned step sizes of every wrapped layer and the learned offsets of its activations."""
        offsets = [getattr(w, f"{t.value}_offset") for w in self.modules_wrapper for t in w.quant_types
                   if t is not QuantType.WEIGHT]
        return [*super().parameters(), *offsets]

    def _init_wrapper(self, wrapper: QuantizerModuleWrapper) -> None:
        """LSQ's parameters, the paper's weight step, and a zero offset per activation type."""
        super()._init_wrapper(wrapper)
        for quant_type in wrapper.quant_types:
            if quant_type is QuantType.WEIGHT:
                weight = wrapper.layer_weight().detach().float()
                bits = wrapper.bits(quant_type)
                mean, std = float(weight.mean()), float(weight.std()) if weight.numel() > 1 else 0.0
                step = max(abs(mean - 3 * std), abs(mean + 3 * std)) / 2 ** (bits - 1)
                with torch.no_grad():
                    wrapper.weight_scale.fill_(max(step, 1e-8))
            else:
                wrapper.register_parameter(f"{quant_type.value}_offset",
                                           nn.Parameter(torch.zeros(1, device=self.device)))

    def _quantize(self, x: torch.Tensor, wrapper: QuantizerModuleWrapper, quant_type: QuantType) -> torch.Tensor:
        if quant_type is QuantType.WEIGHT:
            return super()._quantize(x, wrapper, quant_type)
        name, bits = quant_type.value, wrapper.bits(quant_type)
        step, offset = getattr(wrapper, f"{name}_scale"), getattr(wrapper, f"{name}_offset")
        initialized = getattr(wrapper, f"{name}_initialized")
        qmax = qmax_for(bits)
        if not bool(initialized):
            if not wrapper.training:
                return x  # nothing learned yet: pass through until the first training batch
            with torch.no_grad():
                low, high = float(x.detach().min()), float(x.detach().max())
                step.fill_(max((high - low) / qmax, 1e-8))
                offset.fill_(low)
                initialized.fill_(1)
        s = grad_scale(step, 1.0 / math.sqrt(max(x[0].numel(), 1) * qmax))
        codes = round_ste(torch.clamp((x - offset) / s, 0, qmax))
        with torch.no_grad():
            zero_point = getattr(wrapper, f"{name}_zero_point")
            zero_point.fill_(min(max(round(-float(offset) / float(step)), 0), qmax))
        return (codes * s + offset).to(x.dtype)
