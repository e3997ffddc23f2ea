"""Which layers the low-bit quantizers touch, how to read their weights, and how to swap them for PackedLinear.

Targets are :mod:`slimkit.core.weights`' dense kinds: ``nn.Linear`` and its subclasses that compute
``x W^T + b``, and Hugging Face's GPT-2 style ``Conv1D`` (weight stored transposed, ``[in, out]``); both become a
:class:`PackedLinear` with the same ``y = x W^T + b`` semantics. :func:`select_targets` takes the kinds
explicitly, so the MoE expert kind plugs in where a packed experts module exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn

from slimkit.core.coverage import refusal
from slimkit.core.weights import DENSE, Target, find_targets, select, target_kind, weight_of
from slimkit.engines.quantization.lowbit.experts import PackedExperts
from slimkit.engines.quantization.lowbit.linear import PackedLinear
from slimkit.errors import ConfigError

__all__ = ["KINDS", "in_out", "is_dense", "pack_layer", "release_caches", "replace_module", "replay_layers",
           "require_targets", "select_layers", "select_targets", "weight_of"]

#: The target kinds the low-bit quantizers pack.
KINDS: tuple[str, ...] = DENSE


def is_dense(module: nn.Module) -> bool:
    """``nn.Linear`` (or a subclass) or transformers' ``Conv1D``: an ``[out, in]`` weight (structure only)."""
    return target_kind(module) in DENSE


def release_caches(module: nn.Module) -> None:
    """Drop what the packed layers under ``module`` cache for their kernels (CPU plan, CUDA int4 or dense weight).

    The next call rebuilds what it needs; until then the layers hold only their packed buffers.
    """
    for m in module.modules():
        if isinstance(m, (PackedLinear, PackedExperts)):
            m.release_caches()


def in_out(module: nn.Module) -> tuple[int, int]:
    """``(in_features, out_features)`` of a dense layer."""
    out_f, in_f = weight_of(module).shape
    return in_f, out_f


def select_targets(model: nn.Module, exclude: Iterable[str] = (), kinds: Sequence[str] = KINDS) -> list[Target]:
    """The supported targets of ``kinds`` in ``model`` that no ``exclude`` pattern matches, in module order."""
    return select(find_targets(model, kinds), kinds, tuple(exclude))


def select_layers(model: nn.Module, exclude: Iterable[str] = ()) -> list[str]:
    """Names of :func:`select_targets` (dense kinds)."""
    return [t.name for t in select_targets(model, exclude)]


def require_targets(model: nn.Module, exclude: Iterable[str] = (), kinds: Sequence[str] = KINDS,
                    what: str = "") -> list[Target]:
    """:func:`select_targets`, or a ConfigError naming the layer types found and why none was taken."""
    exclude = tuple(exclude)
    chosen = select_targets(model, exclude, kinds)
    if not chosen:
        raise ConfigError(refusal(find_targets(model), kinds, exclude, what))
    return chosen


def replace_module(model: nn.Module, name: str, new: nn.Module) -> None:
    """Put ``new`` at dotted path ``name`` inside ``model``."""
    model.set_submodule(name, new)


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
        model.set_submodule(name, PackedLinear.from_spec(spec, dtype=dtype, device=device))
    return model
