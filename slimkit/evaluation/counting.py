"""Static cost of a model: parameter count and multiply-accumulates (MACs) of one forward.

Both count the *logical* work of quantized modules too, so that a quantized model reports the same
parameters and MACs as its float original (quantization changes bytes and speed, not arithmetic; int8
multiply-accumulates are MACs). :func:`count_macs_by_dtype` splits the MACs by the type they run in.

A quantized module says what one call did by defining ``call_macs(args, output) -> (label, macs)``: the label
names the arithmetic (``"int8"`` for int8 x int8 products, ``"int4 weights"`` for a weight-only 4-bit layer whose
activations stay float) and ``macs`` counts one call on ``args`` (slimkit's ``Int8Linear`` and ``PackedLinear``
do). Whatever the counter saw inside such a module (a dequantize-and-matmul fallback) is replaced by its own count,
so nothing is counted twice and no class is named here. ``torch.ao`` quantized Linear / Conv modules, whose
kernels the counter cannot see, are counted from their weights as int8. Float MoE experts modules (transformers'
3-D expert weights, whose default ``grouped_mm`` path the counter does not see) are counted from their routing
(:func:`slimkit.core.experts.call_macs`), so a float MoE and its quantized version report the same MACs.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from slimkit.core import experts
from slimkit.core.weights import expert_params
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
    getters = ("get_weight", "get_bias") if type(module).__module__.startswith(_QUANTIZED_PREFIX) else ()
    for name in ("weight", "bias", *getters):  # get_*: dynamic quantized RNNs, dicts of tensors
        method = getattr(module, name, None)
        if not inspect.ismethod(method):
            continue
        try:
            value = method()
        except Exception:  # a method with other semantics: not a weight accessor
            continue
        found = [value] if name not in getters else list(value.values()) if isinstance(value, dict) else []
        yield from (v for v in found if isinstance(v, torch.Tensor))


def count_parameters(model: nn.Module) -> int:
    """Number of weights in ``model``: its parameters plus the logical weights inside quantized modules.

    Shared or tied parameters count once. For ``torch.ao`` quantized modules, whose weights live in packed
    buffers, ``module.weight()`` / ``module.bias()`` are unpacked and their element counts added, so a
    quantized model reports the same count as the float model it came from.
    """
    model = _require_module(model, "count_parameters")
    # unpacked weights are fresh tensors: the list keeps them alive, so freed memory is not reused and mistaken for
    # an already-seen tensor (modules() yields shared modules once)
    tensors = [*model.parameters(), *(w for module in model.modules() for w in _logical_weights(module))]
    return sum({_tensor_key(t): t.numel() for t in tensors}.values())


def _torch_ao_macs(module: nn.Module, inputs: tuple, output: Any) -> tuple[str, int]:
    """``(label, MACs)`` of one call of a torch.ao quantized Linear / Conv / ConvTranspose (FlopCounterMode sees 0).

    The label is ``"int8"`` for int8 weights (the activations are quantized too), else the weight's dtype.
    """
    weight = module.weight()
    label = "int8" if weight.dtype in (torch.qint8, torch.quint8) else _DTYPE_LABELS.get(weight.dtype, "float")
    if not isinstance(output, torch.Tensor):
        return label, 0
    if "ConvTranspose" in type(module).__name__:
        # weight: [in_channels, out_channels / groups, *kernel]; every input element feeds each kernel tap
        x = inputs[0] if inputs and isinstance(inputs[0], torch.Tensor) else None
        return label, 0 if x is None else x.numel() * int(torch.Size(weight.shape[1:]).numel())
    # Linear: weight [out, in]; Conv: weight [out, in / groups, *kernel]
    return label, output.numel() * int(torch.Size(weight.shape[1:]).numel())


def _is_torch_ao(module: nn.Module) -> bool:
    cls = type(module)
    return cls.__module__.startswith(_QUANTIZED_PREFIX) and (
        cls.__name__ == "Linear" or cls.__name__.startswith(("Conv1d", "Conv2d", "Conv3d", "ConvTranspose"))
    )


def _declares_macs(module: nn.Module) -> bool:
    return inspect.ismethod(getattr(module, "call_macs", None))


def _float_experts_macs(module: nn.Module, args: tuple) -> tuple[str, int] | None:
    """``(dtype label, MACs)`` of one call of a float MoE experts module (:func:`slimkit.core.experts.call_macs`)."""
    params = expert_params(module)
    macs = experts.call_macs(module, args) if params else None
    if macs is None:
        return None
    dtype = getattr(module, params[0]).dtype
    return _DTYPE_LABELS.get(dtype, str(dtype).removeprefix("torch.")), macs


_DTYPE_LABELS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}


def _float_label(model: nn.Module) -> str:
    """``"fp32"``, ``"fp16"``, ``"bf16"``...: the dtype of the model's first floating parameter or buffer."""
    for t in (*model.parameters(), *model.buffers()):
        if t.is_floating_point():
            return _DTYPE_LABELS.get(t.dtype, str(t.dtype).removeprefix("torch."))
    return "fp32"


def count_macs_by_dtype(model: nn.Module, inputs: Inputs) -> dict[str, int]:
    """Multiply-accumulates of one forward of ``model`` on ``inputs``, by the type they run in.

    ``{"fp32": ..., "int8": ...}``: float matmuls seen by ``torch.utils.flop_counter.FlopCounterMode`` under the
    model's float dtype; quantized modules under the label their ``call_macs`` gives (see the module doc), torch.ao
    quantized Linear / Conv modules as ``"int8"``. Labels with no MACs are left out. The sum is :func:`count_macs`.
    """
    from torch.utils.flop_counter import FlopCounterMode

    model = _require_module(model, "count_macs")
    counter = FlopCounterMode(display=False)
    quantized: Counter[str] = Counter()
    inside = [0]  # FLOPs the counter saw inside modules that count themselves
    before: dict[int, int] = {}

    def pre_hook(module: nn.Module, args: tuple) -> None:
        before[id(module)] = counter.get_total_flops()

    def post_hook(module: nn.Module, args: tuple, output: Any) -> None:
        seen = counter.get_total_flops() - before.pop(id(module), 0)
        counted = module.call_macs(args, output) if _declares_macs(module) else _float_experts_macs(module, args)
        if counted is not None:  # quantized modules, and float experts whose grouped matmuls the counter misses
            quantized[str(counted[0])] += int(counted[1])
            inside[0] += seen
        elif seen == 0 and _is_torch_ao(module):
            label, macs = _torch_ao_macs(module, args, output)
            quantized[label] += macs

    handles = []
    for module in model.modules():
        if _declares_macs(module) or _is_torch_ao(module) or expert_params(module):
            handles.append(module.register_forward_pre_hook(pre_hook))
            handles.append(module.register_forward_hook(post_hook))
    try:
        with torch.no_grad(), counter:
            run_model(model, move_inputs(inputs, model_device(model)))
    finally:
        for handle in handles:
            handle.remove()
    result = {_float_label(model): (int(counter.get_total_flops()) - inside[0]) // 2}
    for label, macs in quantized.items():
        result[label] = result.get(label, 0) + macs
    return {label: macs for label, macs in result.items() if macs}


def count_macs(model: nn.Module, inputs: Inputs) -> int:
    """Multiply-accumulates of one forward of ``model`` on ``inputs`` (MACs = FLOPs / 2 of matmul-like ops).

    Uses ``torch.utils.flop_counter.FlopCounterMode`` for aten ops (matmuls, convolutions, attention), and counts
    quantized modules (int8, packed low-bit, torch.ao) whose kernels it cannot see, so a quantized model reports
    the MACs of its float original. Elementwise ops (activations, norms, additions) are not counted, as is
    conventional. :func:`count_macs_by_dtype` splits the same total by type.
    """
    return sum(count_macs_by_dtype(model, inputs).values())
