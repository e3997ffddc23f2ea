"""PyTorch's int4 kernel ("tinygemm", ``torch.ops.aten._weight_int4pack_mm``) for :class:`PackedLinear`.

Codes below 16 fit its 4-bit format whatever the stored width (2, 3 or 4 bits), and its dequantisation
``(q - 8) * s + m`` equals ours ``(q - z) * s`` with ``m = (8 - z) * s``. The kernel layout is built once per layer
and device (int4, never fp32) and checked against the dequantised weight: the CUDA op's nibble order differs
between torch builds, so both orders are tried and one that disagrees is never used. The CPU build of the same
op (``_weight_int4pack_mm_for_cpu``) takes the same scales and mins; it lets the CPU tests run this path.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from slimkit.engines.quantization.lowbit.packing import unpack
from slimkit.engines.quantization.lowbit.protocol import PackedLayer

#: tinygemm's group sizes, largest first
GROUPS = (256, 128, 64, 32)


def group_for(layer: PackedLayer) -> int | None:
    """The largest tinygemm group that divides the layer's group size and ``in_features``, or ``None``."""
    for g in GROUPS:
        if layer.group_size % g == 0 and layer.in_features % g == 0:
            return g
    return None


def applies(layer: PackedLayer, device: torch.device) -> bool:
    """Whether the kernel takes this layer on ``device`` (codes < 16, tile-aligned shape, op present)."""
    ops = ("_weight_int4pack_mm", "_convert_weight_to_int4pack") if device.type == "cuda" else (
        "_weight_int4pack_mm_for_cpu", "_convert_weight_to_int4pack_for_cpu")
    return (layer.bits <= 4 and layer.out_features % 8 == 0 and layer.in_features % 128 == 0
            and group_for(layer) is not None and all(hasattr(torch.ops.aten, op) for op in ops))


def scales_and_mins(layer: PackedLayer, group: int) -> torch.Tensor:
    """float32 ``[in // group, out, 2]`` of (scale, min) per tinygemm group: ``(q - 8) * s + m == (q - z) * s``.

    Our groups of ``layer.group_size`` are split into tinygemm's smaller ``group`` (a divisor), repeating their
    scale and zero.
    """
    rep = layer.group_size // group
    scales = layer.scales.float().repeat_interleave(rep, dim=1)[:, : layer.in_features // group]
    zeros = layer.zeros.float().repeat_interleave(rep, dim=1)[:, : layer.in_features // group]
    return torch.stack([scales.t(), ((8 - zeros) * scales).t()], dim=-1).contiguous()


def _layouts(layer: PackedLayer) -> list[torch.Tensor]:
    q = unpack(layer.qweight, layer.bits, layer.in_features)
    if q.device.type != "cuda":
        return [torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 8)]
    even, odd = q[:, 0::2], q[:, 1::2]
    return [torch.ops.aten._convert_weight_to_int4pack((hi << 4 | lo).contiguous(), 8)
            for hi, lo in ((even, odd), (odd, even))]


def build(layer: PackedLayer, dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """``fn(x2d) -> x2d @ W^T + b`` for activations of ``dtype``, everything precomputed.

    ``None`` if no layout of the op reproduces the dequantised weight on this device.
    """
    group = group_for(layer)
    if group is None:
        return None
    cuda = layer.qweight.device.type == "cuda"
    name = "_weight_int4pack_mm" if cuda else "_weight_int4pack_mm_for_cpu"
    # torch's own binding where it has one: ~1 us less per call than the torch.ops.aten packet (decode runs it for
    # every layer and token)
    mm = getattr(torch, name, None) or getattr(torch.ops.aten, name)
    op_dtype = torch.bfloat16 if cuda else dtype  # the CUDA op takes bfloat16 only
    sz = scales_and_mins(layer, group).to(op_dtype)
    bias = None if layer.bias is None else layer.bias.detach().to(dtype)
    probe = torch.randn(3, layer.in_features, device=layer.qweight.device).to(op_dtype)
    reference = F.linear(probe, layer.dequantize(op_dtype))
    for weight in _layouts(layer):
        try:
            out = mm(probe, weight, group, sz)
        except (RuntimeError, NotImplementedError):
            continue
        err = (out.float() - reference.float()).abs().max() / reference.float().abs().max().clamp(min=1e-6)
        if float(err) < 0.05:
            return _call(mm, weight, group, sz, bias, op_dtype, dtype)
    return None


def _call(mm: Callable, weight: torch.Tensor, group: int, sz: torch.Tensor, bias: torch.Tensor | None,
          op_dtype: torch.dtype, dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """The per-call function: no cast, copy or extra allocation when ``x`` is already the op's dtype."""
    if op_dtype == dtype and bias is None:
        return lambda x: mm(x, weight, group, sz)
    if op_dtype == dtype:
        return lambda x: mm(x, weight, group, sz).add_(bias)
    if bias is None:
        return lambda x: mm(x.to(op_dtype), weight, group, sz).to(dtype)
    return lambda x: mm(x.to(op_dtype), weight, group, sz).to(dtype).add_(bias)
