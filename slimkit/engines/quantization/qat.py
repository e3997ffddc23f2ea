"""Quantization-aware training with affine fake-quantization (Jacob et al., 2018; NNI's ``QAT_Quantizer``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.compressor import Quantizer
from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.engines.quantization.grad import ClipGrad, QuantType
from slimkit.engines.quantization.observers import (
    affine_qparams,
    channel_min_max,
    fake_quantize,
    symmetric_qparams,
)
from slimkit.engines.quantization.settings import scheme_of
from slimkit.engines.quantization.wrapper import QuantizerModuleWrapper
from slimkit.errors import check_int


class QATEngine(Quantizer):
    """Affine fake-quantization of weights and activations, trained with a clipped straight-through gradient.

    Weights use their current min/max (per output channel by default); inputs and outputs use ranges tracked
    by exponential-moving-average observers while the model is in train mode (frozen in eval mode).
    Observation happens in :meth:`quantize`, outside the autograd function. Activations are observed from
    the first batch but quantized only once ``quant_start_step`` optimizer steps have run (config key,
    default 0), so the observers settle first. Gradients pass straight through
    inside the clamp range and are zero outside it (:class:`ClipGrad`).

    Args:
        ema_decay: weight of the old range in the EMA update (0.99 keeps about the last 100 batches).
        per_channel: one weight scale per output channel instead of one per tensor.

    NNI 2.x's schemes apply too (``set_quant_scheme_dtype`` or the entry keys ``quant_scheme`` / ``quant_dtype``):
    ``per_channel_*`` / ``per_tensor_*`` choose the weight granularity, ``*_symmetric`` a grid centred on zero.
    A ``per_channel_*`` input or output (NNI 3.0's activation ``granularity: "per_channel"``) tracks one range per
    channel, dim 1 (dim 0 is the batch): its scale and zero point are ``[1, C, 1, ...]``.
    """

    user_name = "QATQuantizer"  # NNI's name for it (slimkit.faces.nni: 2.x and 3.0 signatures)

    quant_grad = ClipGrad
    extra_config_keys = ("quant_start_step", "quant_scheme", "quant_dtype")

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
        ema_decay: float = 0.99,
        per_channel: bool = True,
    ) -> None:
        if not 0.0 <= float(ema_decay) < 1.0:
            raise QuantizationConfigError(f"ema_decay must be in [0, 1), got {ema_decay!r}; 0.99 is typical.")
        self.ema_decay = float(ema_decay)
        self.per_channel = bool(per_channel)
        super().__init__(model, config_list, optimizer, dummy_input)

    def _init_wrapper(self, wrapper: QuantizerModuleWrapper) -> None:
        """Register the weight qparams and the EMA observer buffers of each activation type."""
        start = wrapper.config.get("quant_start_step", 0)
        check_int(f"quant_start_step of layer {wrapper.name!r}", start, 0, error=QuantizationConfigError)
        device = self.device
        wrapper.symmetric, wrapper.channel_wise = {}, {}
        for quant_type in wrapper.quant_types:
            name = quant_type.value
            scheme, _ = scheme_of(wrapper.config, name, wrapper.name)
            wrapper.symmetric[name] = scheme is not None and scheme.endswith("symmetric")
            wrapper.channel_wise[name] = quant_type is not QuantType.WEIGHT and scheme is not None and \
                scheme.startswith("per_channel")
            if quant_type is QuantType.WEIGHT:
                weight = wrapper.layer_weight()
                per_channel = self.per_channel if scheme is None else scheme.startswith("per_channel")
                channels = weight.shape[0] if per_channel and weight.dim() > 1 else 1
                shape = (channels, *([1] * (weight.dim() - 1))) if channels > 1 else (1,)
            else:
                shape = (1,)
                wrapper.register_buffer(f"{name}_tracked_min", torch.zeros(1, device=device))
                wrapper.register_buffer(f"{name}_tracked_max", torch.zeros(1, device=device))
                wrapper.register_buffer(f"{name}_observed", torch.zeros((), dtype=torch.long, device=device))
            wrapper.register_buffer(f"{name}_scale", torch.ones(shape, device=device))
            wrapper.register_buffer(f"{name}_zero_point", torch.zeros(shape, device=device))

    def quantize_weight(self, weight: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """Fake-quantize the weight with scales from its own min/max (per channel unless disabled)."""
        bits = wrapper.bits(QuantType.WEIGHT)
        if wrapper.weight_scale.numel() > 1 and wrapper.weight_scale.shape[0] != weight.shape[0]:
            # a speedup removed output channels of this layer: one scale per channel that is left
            shape = (weight.shape[0], *wrapper.weight_scale.shape[1:])
            wrapper.weight_scale = torch.ones(shape, device=weight.device)
            wrapper.weight_zero_point = torch.zeros(shape, device=weight.device)
        low, high = channel_min_max(weight, wrapper.weight_scale.numel() > 1)
        scale, zero_point = (symmetric_qparams if wrapper.symmetric["weight"] else affine_qparams)(low, high, bits)
        wrapper.weight_scale.copy_(scale.reshape(wrapper.weight_scale.shape))
        wrapper.weight_zero_point.copy_(zero_point.reshape(wrapper.weight_zero_point.shape))
        return fake_quantize(weight, wrapper.weight_scale, wrapper.weight_zero_point, bits)

    def _active(self, wrapper: QuantizerModuleWrapper, quant_type: QuantType) -> bool:
        observed = int(getattr(wrapper, f"{quant_type.value}_observed"))
        return observed > 0 and self.steps >= wrapper.config.get("quant_start_step", 0)

    def quantize(self, tensor: torch.Tensor, quant_type: QuantType, wrapper: QuantizerModuleWrapper) -> torch.Tensor:
        """Observe activations (train mode), then fake-quantize them once active; weights always."""
        if quant_type is not QuantType.WEIGHT:
            name = quant_type.value
            if wrapper.training:
                _ema_update(wrapper, name, tensor, self.ema_decay, bool(wrapper.channel_wise.get(name)))
            if not self._active(wrapper, quant_type):
                return tensor
        return super().quantize(tensor, quant_type, wrapper)

    def activation_qparams(
        self, wrapper: QuantizerModuleWrapper, quant_type: QuantType
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Scale and zero point from the tracked range; ``None`` before the first observed batch."""
        name = quant_type.value
        if int(getattr(wrapper, f"{name}_observed")) == 0:
            return None
        low, high = getattr(wrapper, f"{name}_tracked_min"), getattr(wrapper, f"{name}_tracked_max")
        qparams = symmetric_qparams if wrapper.symmetric.get(name) else affine_qparams
        return qparams(low, high, wrapper.bits(quant_type))

    def _quantize_activation(self, x: torch.Tensor, wrapper: QuantizerModuleWrapper, quant_type: QuantType) -> Any:
        qparams = self.activation_qparams(wrapper, quant_type)
        if qparams is None:
            return x
        scale, zero_point = qparams
        name = quant_type.value
        if scale.dim() > 1 and (x.dim() < 2 or x.shape[1] != scale.shape[1]):
            raise QuantizationConfigError(f"Layer {wrapper.name!r}: its {name} has {x.shape[1] if x.dim() > 1 else 0} "
                                          f"channels but per-channel ranges for {scale.shape[1]} were tracked (a "
                                          "speedup changed it?); run a batch in train mode to track them again.")
        if getattr(wrapper, f"{name}_scale").shape != scale.shape:  # per channel: shaped on the first batch
            setattr(wrapper, f"{name}_scale", scale.clone())
            setattr(wrapper, f"{name}_zero_point", zero_point.clone())
        getattr(wrapper, f"{name}_scale").copy_(scale)
        getattr(wrapper, f"{name}_zero_point").copy_(zero_point)
        return fake_quantize(x, scale, zero_point, wrapper.bits(quant_type))

    def quantize_input(self, inputs: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """Fake-quantize the input with its EMA-tracked range (observing it in train mode)."""
        return self._quantize_activation(inputs, wrapper, QuantType.INPUT)

    def quantize_output(self, output: torch.Tensor, wrapper: QuantizerModuleWrapper, **kwargs: Any) -> torch.Tensor:
        """Fake-quantize the output with its EMA-tracked range (observing it in train mode)."""
        return self._quantize_activation(output, wrapper, QuantType.OUTPUT)


@torch.no_grad()
def _ema_update(wrapper: QuantizerModuleWrapper, name: str, x: torch.Tensor, decay: float, per_channel: bool) -> None:
    """Move the ``name`` range tracked on ``wrapper`` towards batch ``x``'s: one range, or one per channel (dim 1).

    The first batch sets the range, later ones update ``tracked = decay * tracked + (1 - decay) * batch``. Ranges
    per channel are ``[1, C, 1, ...]``, set again from the batch when ``C`` changes. All are buffers (saved).
    """
    x = x.detach()
    if per_channel:
        if x.dim() < 2:
            raise QuantizationConfigError(f"Layer {wrapper.name!r}: a per-channel {name} needs a batch and a "
                                          f"channel dimension (dim 1), got a tensor of shape {tuple(x.shape)}.")
        channels = x.transpose(0, 1).reshape(x.shape[1], -1).float()
        shape = (1, x.shape[1], *([1] * (x.dim() - 2)))
        low, high = channels.min(dim=1).values.reshape(shape), channels.max(dim=1).values.reshape(shape)
    else:
        low, high = x.min().float(), x.max().float()
    tracked_min, tracked_max = getattr(wrapper, f"{name}_tracked_min"), getattr(wrapper, f"{name}_tracked_max")
    observed = getattr(wrapper, f"{name}_observed")
    if per_channel and tracked_min.shape != low.shape:
        setattr(wrapper, f"{name}_tracked_min", low)
        setattr(wrapper, f"{name}_tracked_max", high)
        observed.fill_(1)
    elif int(observed) == 0:
        tracked_min.copy_(low)
        tracked_max.copy_(high)
        observed.fill_(1)
    else:
        tracked_min.mul_(decay).add_(low * (1.0 - decay))
        tracked_max.mul_(decay).add_(high * (1.0 - decay))
        observed.add_(1)
