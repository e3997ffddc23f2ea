"""The kind of result a layer is (float, packed low-bit, packed experts, int8): what a checkpoint format holds.

A format judges a layer by its :class:`LayerKind`, read from the module itself (:func:`layer_kind`) or, before a
recipe runs, from what its quantizer declares it produces (:func:`recipe_kinds`, from
:class:`slimkit.core.contract.LayerResult`), so formats never need an algorithm's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from slimkit.core import registry
from slimkit.engines.quantization.experts import DOWN, FIRST
from slimkit.engines.quantization.int8.linear import Int8Linear
from slimkit.engines.quantization.lowbit.experts import PackedExperts
from slimkit.engines.quantization.lowbit.linear import PER_CHANNEL, PackedLinear
from slimkit.errors import ConfigError

FLOAT = "float"
PACKED = "packed"
PACKED_EXPERTS = "packed experts"
INT8 = "int8"


class FormatError(ConfigError):
    """A model, layer or checkpoint that a format cannot hold or slimkit cannot read; says what is supported."""


@dataclass(frozen=True)
class LayerKind:
    """What one layer is, as far as a checkpoint format cares.

    ``group_size`` is None for one group per row (per-channel); shapes and ``zero_min`` (the smallest zero point)
    are None when not known (a recipe not run yet).
    """

    kind: str
    bits: int | None = None
    group_size: int | None = None
    sym: bool = False
    integer_zeros: bool = True
    input_scale: bool = False
    in_features: int | None = None
    out_features: int | None = None
    zero_min: float | None = None

    def describe(self) -> str:
        """``"4-bit, groups of 128, asymmetric"`` (``"float"``, ``"int8"``), for model cards and messages."""
        if self.kind in (FLOAT, INT8):
            return self.kind
        return (f"{self.bits}-bit, {'one group per row' if self.group_size is None else f'groups of {self.group_size}'}"
                f", {'symmetric' if self.sym else 'asymmetric'}{', input scale' if self.input_scale else ''}")


def few_names(names: list[str]) -> str:
    """``"a, b, c and 4 more"``: the first three of ``names``, for messages."""
    return f"{', '.join(names[:3])}{f' and {len(names) - 3} more' if len(names) > 3 else ''}"


def symmetric_grid(module: PackedLinear | PackedExperts) -> bool:
    """Whether a packed layer (or experts module) uses the symmetric grid: every zero point is the middle code."""
    mid = 1 << (module.bits - 1)
    return all(bool((z.float() == mid).all()) for z in _zeros(module))


def _zeros(module: PackedLinear | PackedExperts) -> list[Any]:
    return [module.zeros] if isinstance(module, PackedLinear) else [module.packed(w)[2] for w in (FIRST, DOWN)]


def layer_kind(module: nn.Module) -> LayerKind | None:
    """The kind of ``module`` (None for a module that holds no weight matrix of its own)."""
    if isinstance(module, (PackedLinear, PackedExperts)):
        zeros = [z.float() for z in _zeros(module)]
        whole = all(s.shape[-1] == 1 for s in ([module.scales] if isinstance(module, PackedLinear)
                                               else [module.packed(w)[1] for w in (FIRST, DOWN)]))
        experts = isinstance(module, PackedExperts)
        return LayerKind(PACKED_EXPERTS if experts else PACKED, module.bits, None if whole else module.group_size,
                         symmetric_grid(module), all(bool((z == z.round()).all()) for z in zeros),
                         bool(module.input_scale) if experts else module.input_scale is not None,
                         None if experts else module.in_features, None if experts else module.out_features,
                         min(float(z.min()) for z in zeros) if all(z.numel() for z in zeros) else None)
    if type(module) is nn.Linear:
        return LayerKind(FLOAT, in_features=module.in_features, out_features=module.out_features)
    if isinstance(module, Int8Linear):
        return LayerKind(INT8)
    return None


def recipe_kinds(smash_config: Any) -> dict[str, LayerKind | None]:
    """``{active algorithm: the LayerKind it produces}`` (None where it declares no :class:`LayerResult`)."""
    kinds: dict[str, LayerKind | None] = {}
    for name in smash_config.get_active_algorithms():
        result = registry.get(name).produces
        if result is None:
            kinds[name] = None
            continue
        hps = registry.get(name).effective_hyperparameters(smash_config.hyperparameters_of(name))
        group = int(hps.get("group_size") or PER_CHANNEL)
        kinds[name] = LayerKind(result.kind, hps.get("bits"), None if group == PER_CHANNEL else group,
                                bool(hps.get("sym", False)), result.integer_zeros,
                                result.input_scale_unless is not None and not hps.get(result.input_scale_unless))
    return kinds


def producers() -> dict[str, Any]:
    """``{algorithm: LayerResult}`` of every registered algorithm that declares what it produces."""
    return {n: registry.get(n).produces for n in registry.names() if registry.get(n).produces is not None}


def made_by(fmt: str) -> list[str]:
    """The algorithms whose result is a whole file in format ``fmt`` (they declare it as ``stream_format``)."""
    return [n for n in registry.names() if registry.get(n).stream_format == fmt]


def input_scale_fix() -> str:
    """``"awq_fold_only=True"``-style settings that avoid input scales, from the algorithms' declarations."""
    return " or ".join(f"{n}_{r.input_scale_unless}=True" for n, r in producers().items() if r.input_scale_unless)


__all__ = ["FLOAT", "INT8", "PACKED", "PACKED_EXPERTS", "FormatError", "LayerKind", "few_names", "input_scale_fix",
           "layer_kind", "made_by", "producers", "recipe_kinds", "symmetric_grid"]
