"""Which layers the low-bit quantizers touch, how to read their weights, and how to swap them for PackedLinear.

Quantizable layers are ``nn.Linear`` and Hugging Face's GPT-2 style ``Conv1D`` (a Linear whose weight is stored
transposed, ``[in, out]``); both become a :class:`PackedLinear` with the same ``y = x W^T + b`` semantics.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from slimkit.compression.quantization.lowbit.linear import PackedLinear
from slimkit.core.selection import matches
from slimkit.errors import ConfigError


def _conv1d_type() -> type | None:
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # pragma: no cover - transformers is a dependency
        return None
    return Conv1D


def is_quantizable(module: nn.Module) -> bool:
    """``nn.Linear`` (exact type) or transformers' ``Conv1D``."""
    conv1d = _conv1d_type()
    return type(module) is nn.Linear or (conv1d is not None and type(module) is conv1d)


def weight_of(module: nn.Module) -> torch.Tensor:
    """The layer's weight as ``[out, in]`` (a view, transposed for Conv1D)."""
    w = module.weight
    return w if type(module) is nn.Linear else w.t()


def in_out(module: nn.Module) -> tuple[int, int]:
    """``(in_features, out_features)`` of a quantizable layer."""
    out_f, in_f = weight_of(module).shape
    return in_f, out_f


def select_layers(model: nn.Module, exclude: Iterable[str] = ()) -> list[str]:
    """Names of the quantizable layers of ``model`` that no ``exclude`` pattern matches, in module order."""
    exclude = tuple(exclude)
    return [name for name, m in model.named_modules() if name and is_quantizable(m) and not matches(name, exclude)]


def replace_module(model: nn.Module, name: str, new: nn.Module) -> None:
    """Put ``new`` at dotted path ``name`` inside ``model``."""
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def pack_layer(
    module: nn.Module,
    q: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bits: int,
    group_size: int,
    input_scale: torch.Tensor | None = None,
) -> PackedLinear:
    """A PackedLinear carrying ``module``'s bias (in its dtype and device) and the given codes and parameters."""
    bias = getattr(module, "bias", None)
    return PackedLinear.from_quantized(
        q.to(module.weight.device), scales, zeros, bits, group_size,
        None if bias is None else bias.detach(), input_scale, dtype=module.weight.dtype,
    )


def require_layers(names: list[str], exclude: Iterable[str]) -> list[str]:
    """Return ``names``, or raise a ConfigError when the ``exclude`` patterns left nothing to quantize."""
    if not names:
        raise ConfigError(
            f"No layer to quantize: every nn.Linear is excluded by {list(exclude)}. Loosen the 'exclude' patterns."
        )
    return names


def replay_layers(model: nn.Module, specs: dict[str, dict]) -> nn.Module:
    """Swap each named layer for an EMPTY PackedLinear of the recorded shape (no weights are quantized or kept).

    Used on load: the saved packed buffers then load strictly into these modules.
    """
    for name, spec in specs.items():
        try:
            old = model.get_submodule(name)
        except AttributeError as exc:
            raise ConfigError(
                f"The saved model quantized layer {name!r}, which the rebuilt model does not have; pass the same "
                "architecture that was smashed."
            ) from exc
        dtype = old.weight.dtype if isinstance(getattr(old, "weight", None), torch.Tensor) else torch.float32
        device = old.weight.device if isinstance(getattr(old, "weight", None), torch.Tensor) else None
        replace_module(model, name, PackedLinear.from_spec(spec, dtype=dtype, device=device))
    return model
