"""Static cost of a model: parameter count and multiply-accumulates (MACs) of one forward.

Both count the *logical* work of quantized modules too, so that a quantized model reports the same
parameters and MACs as its float original (quantization changes bytes and speed, not arithmetic).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from slimkit.errors import ModelNotSupportedError
from slimkit.utils import Inputs, model_device, move_inputs, run_model

_QUANTIZED_PREFIX = "torch.ao.nn.quantized"


def _require_module(model: Any, what: str) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise ModelNotSupportedError(
            f"{what} needs a torch.nn.Module, got {type(model).__name__}; "
            "pass the model itself (for a SmashedModel, its underlying module)."
        )
    return model


def _tensor_key(t: torch.Tensor) -> tuple:
    """Identity of the memory a tensor views, so tied weights held by two Parameters count once."""
    ptr = t.data_ptr() if t.device.type != "meta" else 0
    if ptr == 0:
        return ("id", id(t))
    return ("mem", t.device.type, ptr, tuple(t.shape), tuple(t.stride()), t.dtype)


def _logical_weights(module: nn.Module) -> Iterator[torch.Tensor]:
    """Weights a quantized module keeps outside ``parameters()`` (packed params exposed via methods)."""
    for name in ("weight", "bias"):
        attr = getattr(module, name, None)
        if inspect.ismethod(attr):
            try:
                value = attr()
            except Exception:  # a method with other semantics: not a weight accessor
                continue
            if isinstance(value, torch.Tensor):
                yield value
    if type(module).__module__.startswith(_QUANTIZED_PREFIX):
        for name in ("get_weight", "get_bias"):  # dynamic quantized RNNs: dicts of tensors
            getter = getattr(module, name, None)
            if inspect.ismethod(getter):
                try:
                    values = getter()
                except Exception:
                    continue
                if isinstance(values, dict):
                    yield from (v for v in values.values() if isinstance(v, torch.Tensor))


def count_parameters(model: nn.Module) -> int:
    """Number of weights in ``model``: its parameters plus the logical weights inside quantized modules.

    Shared or tied parameters count once. For ``torch.ao`` quantized modules, whose weights live in packed
    buffers, ``module.weight()`` / ``module.bias()`` are unpacked and their element counts added, so a
    quantized model reports the same count as the float model it came from.
    """
    model = _require_module(model, "count_parameters")
    seen: set[tuple] = set()
    total = 0
    for param in model.parameters():
        key = _tensor_key(param)
        if key not in seen:
            seen.add(key)
            total += param.numel()
    alive = []  # unpacked weights are fresh tensors: keep them alive so freed memory is not reused and
    for module in model.modules():  # mistaken for an already-seen tensor. modules() yields shared ones once.
        for weight in _logical_weights(module):
            alive.append(weight)
            key = _tensor_key(weight)
            if key not in seen:
                seen.add(key)
                total += weight.numel()
    return total


def _quantized_macs(module: nn.Module, inputs: tuple, output: Any) -> int:
    """MACs of one call of a torch.ao quantized Linear / Conv / ConvTranspose (FlopCounterMode sees 0)."""
    if not isinstance(output, torch.Tensor):
        return 0
    weight = module.weight()
    if "ConvTranspose" in type(module).__name__:
        # weight: [in_channels, out_channels / groups, *kernel]; every input element feeds each kernel tap
        x = inputs[0] if inputs and isinstance(inputs[0], torch.Tensor) else None
        return 0 if x is None else x.numel() * int(torch.Size(weight.shape[1:]).numel())
    # Linear: weight [out, in]; Conv: weight [out, in / groups, *kernel]
    return output.numel() * int(torch.Size(weight.shape[1:]).numel())


def _is_hooked_type(module: nn.Module) -> bool:
    cls = type(module)
    return cls.__module__.startswith(_QUANTIZED_PREFIX) and (
        cls.__name__ == "Linear" or cls.__name__.startswith(("Conv1d", "Conv2d", "Conv3d", "ConvTranspose"))
    )


def count_macs(model: nn.Module, inputs: Inputs) -> int:
    """Multiply-accumulates of one forward of ``model`` on ``inputs`` (MACs = FLOPs / 2 of matmul-like ops).

    Uses ``torch.utils.flop_counter.FlopCounterMode`` for aten ops (matmuls, convolutions, attention) and
    forward hooks for ``torch.ao`` quantized Linear / Conv modules whose kernels it cannot see; a hook only
    adds its MACs when the counter saw nothing inside that module, so nothing is counted twice.
    Elementwise ops (activations, norms, additions) are not counted, as is conventional.
    """
    from torch.utils.flop_counter import FlopCounterMode

    model = _require_module(model, "count_macs")
    counter = FlopCounterMode(display=False)
    extra = [0]
    before: dict[int, int] = {}

    def pre_hook(module: nn.Module, args: tuple) -> None:
        before[id(module)] = counter.get_total_flops()

    def post_hook(module: nn.Module, args: tuple, output: Any) -> None:
        if counter.get_total_flops() == before.pop(id(module), 0):
            extra[0] += _quantized_macs(module, args, output)

    handles = []
    for module in model.modules():
        if _is_hooked_type(module):
            handles.append(module.register_forward_pre_hook(pre_hook))
            handles.append(module.register_forward_hook(post_hook))
    try:
        with torch.no_grad(), counter:
            run_model(model, move_inputs(inputs, model_device(model)))
    finally:
        for handle in handles:
            handle.remove()
    return int(counter.get_total_flops()) // 2 + extra[0]
