"""What one packed layer's grid is, and whether another tool's checkpoint format can hold it exactly.

slimkit's :class:`PackedLinear` stores ``w = (q - z) * s`` with unsigned codes ``q`` in ``[0, 2**bits)``, float16
scales ``s`` and zero points ``z`` per (row, group of consecutive input columns). compressed-tensors'
``pack-quantized`` and the GPTQ checkpoint layout store the same thing with integer zero points, so a layer moves
between them bit for bit when:

- ``bits`` is 4 or 8 (what both formats' packers and their serving kernels take),
- its zero points are integers (fitted fractional zeros are not),
- each row splits into whole groups (``in_features % group_size == 0``) or is one group (per-channel),
- it has no input scale (neither format multiplies a layer's input).

Symmetric layers (every zero at the middle code ``2**(bits-1)``) are written without zero points. Every check
names the layer and what the format supports, and runs before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.lowbit.linear import PackedLinear
from slimkit.formats.kinds import FLOAT, PACKED, PACKED_EXPERTS, FormatError, LayerKind, input_scale_fix, producers

COMPRESSED_TENSORS = "compressed-tensors"
GPTQ = "gptq"
#: bit widths both formats hold
FORMAT_BITS = (4, 8)


@dataclass(frozen=True)
class WeightScheme:
    """The grid of one packed layer: ``bits``, ``group_size`` (``None`` = one group per row) and symmetry."""

    bits: int
    group_size: int | None
    sym: bool

    def describe(self) -> str:
        """``"4-bit g128 asymmetric"`` / ``"8-bit per-channel symmetric"``, for cards and messages."""
        grid = "per-channel" if self.group_size is None else f"g{self.group_size}"
        return f"{self.bits}-bit {grid} {'symmetric' if self.sym else 'asymmetric'}"


def integer_producers() -> list[str]:
    """The algorithms whose packed layers have integer zero points (what these formats hold)."""
    return [n for n, r in producers().items() if r.kind == PACKED and r.integer_zeros]


def supported_text(fmt: str) -> str:
    """One sentence listing what ``fmt`` holds, for error messages."""
    extra = " Asymmetric GPTQ zero points must be at least 1 (the layout stores zero - 1)." if fmt == GPTQ else ""
    return (f"{fmt} holds weight-only integer quantization at {' or '.join(map(str, FORMAT_BITS))} bits, "
            "symmetric or asymmetric with integer zero points, groups that divide each row (32/64/128...) or one "
            f"group per row (per-channel), no input scale: what {', '.join(integer_producers())} produce "
            f"(with {input_scale_fix()}).{extra}")


def hf_refusals(kind: LayerKind, fmt: str) -> list[str]:
    """Why ``fmt`` (compressed-tensors or gptq) cannot hold a layer of ``kind`` exactly (empty when it can)."""
    if kind.kind == FLOAT:
        return []
    if kind.kind == PACKED_EXPERTS:
        return ["fused mixture-of-experts tensors, where readers expect one packed matrix per expert (keep the "
                "experts in float)"]
    if kind.kind != PACKED:
        return [f"{kind.kind} weights, which the format has no layout for (keep the layer in float)"]
    problems = []
    if kind.input_scale:
        problems.append(f"an input scale that no preceding layer absorbed (set {input_scale_fix()}, or exclude the "
                        "layer)")
    if kind.bits not in FORMAT_BITS:
        problems.append(f"{kind.bits}-bit codes")
    if kind.group_size is not None and kind.in_features is not None and kind.in_features % kind.group_size:
        problems.append(f"rows of {kind.in_features} columns that do not split into whole groups of "
                        f"{kind.group_size}")
    if not kind.integer_zeros:
        problems.append("fractional zero points (the format stores integers)")
    elif fmt == GPTQ and not kind.sym and kind.zero_min is not None and kind.zero_min < 1:
        problems.append("an asymmetric zero point of 0, which the gptq layout (zero - 1 stored unsigned) cannot "
                        "hold (export to compressed-tensors instead)")
    pf = 32 // kind.bits if kind.bits in FORMAT_BITS else 1
    if fmt == GPTQ and kind.in_features is not None and (kind.in_features % pf or kind.out_features % pf):
        problems.append(f"a [{kind.out_features}, {kind.in_features}] weight, but gptq packs {pf} {kind.bits}-bit "
                        "values per int32 word along both dims (export it to compressed-tensors)")
    return problems


def own_scheme(layer: PackedLinear) -> WeightScheme:
    """The layer's grid on its own; :func:`unify_schemes` then makes the model's layers agree."""
    groups = layer.scales.shape[1]
    group_size = None if groups == 1 and layer.in_features % layer.group_size else layer.group_size
    return WeightScheme(layer.bits, group_size, bool((layer.zeros.float() == (1 << (layer.bits - 1))).all()))


def unify_schemes(schemes: dict[str, WeightScheme], group_sizes: dict[str, int],
                  single_group: dict[str, bool]) -> dict[str, WeightScheme]:
    """One zero rule and one group rule for all layers (``schemes`` from :func:`own_scheme`).

    With several group sizes (per-channel, or mixed) a layer whose row is one group is written per-channel; when
    any layer is asymmetric, all are (zero points written for every layer). ``group_sizes`` are the layers'
    ``group_size`` attributes, ``single_group`` whether each has one group per row.
    """
    if len(set(group_sizes.values())) > 1:
        schemes = {n: WeightScheme(s.bits, None if single_group[n] else s.group_size, s.sym)
                   for n, s in schemes.items()}
    if not all(s.sym for s in schemes.values()):
        schemes = {n: WeightScheme(s.bits, s.group_size, False) for n, s in schemes.items()}
    return schemes


def plain_linears(model: nn.Module) -> list[str]:
    """Names of the float ``nn.Linear`` layers (the ones a format lists as not quantized)."""
    return [n for n, m in model.named_modules() if n and isinstance(m, nn.Linear)]


def model_schemes(model: nn.Module, fmt: Any) -> dict[str, WeightScheme]:
    """Every packed layer's scheme (symmetric ones made asymmetric when any layer is asymmetric: one zero rule).

    ``fmt`` is the :class:`~slimkit.formats.base.CheckpointFormat`; it refuses with ALL the layers at fault (the
    first few named) before anything is written.
    """
    layers = {n: m for n, m in model.named_modules() if isinstance(m, PackedLinear)}
    if not layers:
        raise FormatError(f"The model has no slimkit-packed low-bit layer, so there is nothing for {fmt.name} to hold; "
                          f"smash it with one of {', '.join(integer_producers())} first.")
    fmt.check_layers(model)
    return unify_schemes({name: own_scheme(layer) for name, layer in layers.items()},
                         {n: layer.group_size for n, layer in layers.items()},
                         {n: layer.scales.shape[1] == 1 for n, layer in layers.items()})


def signed_codes(layer: PackedLinear) -> torch.Tensor:
    """The codes as int8 centred on 0 (``q - 2**(bits-1)``): both formats' convention."""
    return (layer.codes().to(torch.int16) - (1 << (layer.bits - 1))).to(torch.int8)
