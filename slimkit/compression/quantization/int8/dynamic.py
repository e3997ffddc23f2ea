"""torch.ao dynamic int8 of ``nn.Linear`` layers (fbgemm): int8 weights, activations quantized per batch."""

from __future__ import annotations

import warnings

import torch

from slimkit.core.selection import matches


def linear_names(model: torch.nn.Module, exclude: tuple[str, ...] = ()) -> list[str]:
    """Names of the plain ``nn.Linear`` modules of ``model`` that ``exclude`` does not name (exact or glob)."""
    return [
        name
        for name, module in model.named_modules()
        if type(module) is torch.nn.Linear and not matches(name, exclude)
    ]


def quantize_linears(model: torch.nn.Module, per_channel: bool, exclude: tuple[str, ...] = ()) -> torch.nn.Module:
    """Swap the selected ``nn.Linear`` layers of ``model`` for torch.ao dynamic int8 ones, in place.

    torch.ao quantizes activations with 7 bits (``reduce_range``), which no fbgemm kernel can saturate.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao prints deprecation notices on every call
        from torch.ao.quantization import (
            default_dynamic_qconfig,
            per_channel_dynamic_qconfig,
            quantize_dynamic,
        )

        engines = torch.backends.quantized.supported_engines
        torch.backends.quantized.engine = "fbgemm" if "fbgemm" in engines else "qnnpack"
        qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
        spec = {name: qconfig for name in linear_names(model, exclude)}
        return quantize_dynamic(model, qconfig_spec=spec, dtype=torch.qint8, inplace=True)
