"""What one packed layer's grid is, and whether another tool's checkpoint format can hold it exactly.

slimkit's :class:`PackedLinear` stores ``w = (q - z) * s`` with unsigned codes ``q`` in ``[0, 2**bits)``, float16
scales ``s`` and zero points ``z`` per (row, group of consecutive input columns). compressed-tensors'
``pack-quantized`` and the GPTQ checkpoint layout store the same thing with integer zero points, so a layer moves
between them bit for bit when:

- ``bits`` is 4 or 8 (what both formats' packers and their serving kernels take),
- its zero points are integers (RTN, GPTQ and AWQ give integer zeros; HQQ's are fractional by design),
- each row splits into whole groups (``in_features % group_size == 0``) or is one group (per-channel),
- it has no AWQ input scale (neither format multiplies a layer's input; ``awq_fold_only=True`` avoids them).

Symmetric layers (every zero at the middle code ``2**(bits-1)``) are written without zero points. Every check
names the layer and what the format supports, and runs before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from slimkit.compression.quantization.lowbit.linear import PackedLinear
from slimkit.errors import ConfigError

COMPRESSED_TENSORS = "compressed-tensors"
GPTQ = "gptq"
#: formats slimkit writes and reads besides its own
FORMATS = (COMPRESSED_TENSORS, GPTQ)
#: bit widths both formats hold
FORMAT_BITS = (4, 8)
#: the low-bit quantizers whose layers a format can hold (hqq only where its fractional zeros happen to be integers)
FORMAT_ALGORITHMS = ("rtn", "gptq", "awq", "hqq")


class FormatError(ConfigError):
    """A model, layer or checkpoint that a format cannot hold or slimkit cannot read; says what is supported."""


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


def supported_text(fmt: str) -> str:
    """One sentence listing what ``fmt`` holds, for error messages."""
    extra = " Asymmetric GPTQ zero points must be at least 1 (the layout stores zero - 1)." if fmt == GPTQ else ""
    return (f"{fmt} holds weight-only integer quantization at {' or '.join(map(str, FORMAT_BITS))} bits, "
            "symmetric or asymmetric with integer zero points, groups that divide each row (32/64/128...) or one "
            f"group per row (per-channel), no AWQ input scale: what {', '.join(FORMAT_ALGORITHMS[:3])} produce "
            f"(awq with awq_fold_only=True).{extra}")


def check_format(fmt: str) -> str:
    """Return ``fmt`` if it is a known export format, else a FormatError listing them."""
    if fmt not in FORMATS:
        raise FormatError(f"Unknown checkpoint format {fmt!r}; use 'slimkit' (the default) or one of "
                          f"{', '.join(repr(f) for f in FORMATS)}.")
    return fmt


def _problems(layer: PackedLinear, fmt: str) -> list[str]:
    """Why ``fmt`` cannot hold ``layer`` exactly (empty when it can)."""
    mid = 1 << (layer.bits - 1)
    problems = []
    if layer.input_scale is not None:
        problems.append("an AWQ input scale that no preceding layer absorbed (smash awq with awq_fold_only=True, "
                        "or exclude the layer)")
    if layer.bits not in FORMAT_BITS:
        problems.append(f"{layer.bits}-bit codes")
    if layer.scales.shape[1] > 1 and layer.in_features % layer.group_size:
        problems.append(f"rows of {layer.in_features} columns that do not split into whole groups of "
                        f"{layer.group_size}")
    zeros = layer.zeros.float()
    if not bool((zeros == zeros.round()).all()):
        problems.append("fractional zero points (hqq fits them; the format stores integers)")
    elif fmt == GPTQ and not bool((zeros == mid).all()) and bool((zeros < 1).any()):
        problems.append("an asymmetric zero point of 0, which the gptq layout (zero - 1 stored unsigned) cannot "
                        "hold (export to compressed-tensors instead)")
    return problems


def layer_problems(layer: PackedLinear, name: str, fmt: str) -> None:
    """A FormatError naming ``layer`` when ``fmt`` cannot hold it exactly (see :func:`layer_scheme`); else nothing."""
    problems = _problems(layer, fmt)
    if problems:
        raise FormatError(f"{name}: {fmt} cannot hold this layer exactly: it has {'; '.join(problems)}. "
                          f"{supported_text(fmt)}")


def _scheme(layer: PackedLinear) -> WeightScheme:
    groups = layer.scales.shape[1]
    group_size = None if groups == 1 and layer.in_features % layer.group_size else layer.group_size
    return WeightScheme(layer.bits, group_size, bool((layer.zeros.float() == (1 << (layer.bits - 1))).all()))


def own_scheme(layer: PackedLinear) -> WeightScheme:
    """The layer's grid on its own; :func:`unify_schemes` then makes the model's layers agree."""
    return _scheme(layer)


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


def layer_scheme(layer: PackedLinear, name: str, fmt: str) -> WeightScheme:
    """The scheme of ``layer`` if format ``fmt`` holds it exactly, else a FormatError naming the layer and the fix."""
    layer_problems(layer, name, fmt)
    return _scheme(layer)


def packed_layers(model: nn.Module) -> dict[str, PackedLinear]:
    """``{name: layer}`` of every PackedLinear in ``model``, in module order."""
    return {n: m for n, m in model.named_modules() if isinstance(m, PackedLinear)}


def plain_linears(model: nn.Module) -> list[str]:
    """Names of the float ``nn.Linear`` layers (the ones a format lists as not quantized)."""
    return [n for n, m in model.named_modules() if n and isinstance(m, nn.Linear)]


def model_schemes(model: nn.Module, fmt: str) -> dict[str, WeightScheme]:
    """Every packed layer's scheme (symmetric ones made asymmetric when any layer is asymmetric: one zero rule).

    Refuses with ALL the layers at fault (the first few named) before anything is written.
    """
    layers = packed_layers(model)
    if not layers:
        raise FormatError(f"The model has no slimkit-packed low-bit layer, so there is nothing for {fmt} to hold; "
                          f"smash it with one of {', '.join(FORMAT_ALGORITHMS[:3])} first.")
    by_problem: dict[str, list[str]] = {}
    for name, layer in layers.items():
        for problem in _problems(layer, fmt):
            by_problem.setdefault(problem, []).append(name)
    if by_problem:
        parts = [f"{problem} ({', '.join(names[:3])}{f' and {len(names) - 3} more' if len(names) > 3 else ''})"
                 for problem, names in by_problem.items()]
        raise FormatError(f"{fmt} cannot hold these layers exactly: {'; '.join(parts)}. {supported_text(fmt)}")
    return unify_schemes({name: _scheme(layer) for name, layer in layers.items()},
                         {n: layer.group_size for n, layer in layers.items()},
                         {n: layer.scales.shape[1] == 1 for n, layer in layers.items()})


def signed_codes(layer: PackedLinear) -> torch.Tensor:
    """The codes as int8 centred on 0 (``q - 2**(bits-1)``): both formats' convention."""
    return (layer.codes().to(torch.int16) - (1 << (layer.bits - 1))).to(torch.int8)
