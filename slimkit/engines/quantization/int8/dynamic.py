"""torch.ao dynamic int8 of dense layers (fbgemm): int8 weights, activations quantized per batch.

Targets come from :mod:`slimkit.core.weights`: ``nn.Linear`` and its subclasses that compute ``x W^T + b``
(Falcon's ``FalconLinear``), and transformers' ``Conv1D`` (GPT-2; weight stored transposed). torch.ao only swaps
modules whose type is exactly ``nn.Linear``, so each other target is first replaced by a plain ``nn.Linear``
with the same ``[out, in]`` weight (shared for a subclass, a transposed copy for ``Conv1D``) and then quantized.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence

import torch
from torch import nn

from slimkit.core.selection import matches
from slimkit.core.weights import DENSE, Target, weight_of
from slimkit.engines.quantization.int8.linear import use_fbgemm

#: The target kinds int8_dynamic quantizes (MoE experts are not among them yet).
KINDS: tuple[str, ...] = DENSE


def legacy_linear_names(model: nn.Module, exclude: tuple[str, ...] = ()) -> list[str]:
    """What saves made before the shared target definition quantized: exact ``nn.Linear`` layers only."""
    return [name for name, m in model.named_modules() if type(m) is nn.Linear and not matches(name, exclude)]


def as_plain_linear(module: nn.Module) -> nn.Linear:
    """``module`` itself when it is an ``nn.Linear``, else a plain ``nn.Linear`` computing the same ``x W^T + b``.

    A Linear subclass shares its weight and bias; a ``Conv1D`` gives a transposed contiguous copy of its weight.
    """
    if type(module) is nn.Linear:
        return module
    weight = weight_of(module)
    bias = getattr(module, "bias", None)
    plain = nn.Linear(weight.shape[1], weight.shape[0], bias=isinstance(bias, torch.Tensor), device="meta")
    plain.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight.detach().contiguous(), False)
    if isinstance(bias, torch.Tensor):
        plain.bias = bias if isinstance(bias, nn.Parameter) else nn.Parameter(bias.detach(), False)
    return plain.train(module.training)


def quantize_named(model: nn.Module, names: Iterable[str], per_channel: bool) -> nn.Module:
    """Swap the named dense layers of ``model`` for torch.ao dynamic int8 ``Linear`` modules, in place.

    torch.ao quantizes activations with 7 bits (``reduce_range``), which no fbgemm kernel can saturate.
    """
    names = list(names)
    for name in names:
        module = model.get_submodule(name)
        if type(module) is not nn.Linear:
            model.set_submodule(name, as_plain_linear(module))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao prints deprecation notices on every call
        from torch.ao.quantization import (
            default_dynamic_qconfig,
            per_channel_dynamic_qconfig,
            quantize_dynamic,
        )

        use_fbgemm()
        qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
        return quantize_dynamic(model, qconfig_spec=dict.fromkeys(names, qconfig), dtype=torch.qint8, inplace=True)


def quantize_targets(model: nn.Module, targets: Sequence[Target], per_channel: bool) -> list[str]:
    """Quantize ``targets`` (from :func:`slimkit.core.weights.select`, dense kinds) in place; returns their names."""
    other = sorted({t.kind for t in targets if t.kind not in KINDS})
    if other:
        raise ValueError(f"int8_dynamic quantizes {list(KINDS)} targets; got {other}.")
    names = [t.name for t in targets]
    quantize_named(model, names, per_channel)
    return names
