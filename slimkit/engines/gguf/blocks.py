"""slimkit's packed low-bit weights as GGUF blocks, bit for bit where the two grids agree.

GGUF's legacy block formats hold 32 consecutive weights of a row per block (``ggml-common.h``):

- ``Q4_0``: ``d`` (fp16), 16 bytes of 4-bit codes; weight ``d * (q - 8)``.
- ``Q4_1``: ``d``, ``m`` (fp16), 16 bytes of 4-bit codes; weight ``d * q + m``.
- ``Q8_0``: ``d`` (fp16), 32 signed bytes; weight ``d * q``.

In a 4-bit block byte ``j`` holds weight ``j`` in its low nibble and weight ``j + 16`` in its high nibble.

slimkit's :class:`PackedLinear` stores ``w = (q - z) * s`` with ``s`` and ``z`` fp16 per (row, group). A group of
32 (or any multiple of 32: each of its blocks repeats the group's scale) maps:

- 4 bits, every ``z == 8`` (``sym=True``): ``Q4_0`` with ``d = s``: exact.
- 4 bits otherwise (RTN/GPTQ/AWQ integer zeros, HQQ fractional zeros): ``Q4_1`` with ``d = s`` and
  ``m = fp16(-z * s)``. ``z * s`` is exact in fp32, rounding it to fp16 moves every weight of the block by the
  same ``|dm| <= 2**-11 * |z * s|`` (at most ``15 * 2**-11 = 0.73 %`` of a quantization step; ``2**-25`` for
  subnormal ``m``): the only difference from slimkit's own dequantized weight.
- 8 bits, every ``z == 128`` (``sym=True``): ``Q8_0`` with ``d = s``, codes ``q - 128``: exact.

Anything else (2/3 bits, 8-bit asymmetric, groups not a multiple of 32, AWQ input scales) has no GGUF twin and
is refused, naming the settings that have one; nothing is re-quantized behind the user's back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType

from slimkit.errors import ConfigError

BLOCK = 32
_FIX = ("quantize with bits=4 (sym=False -> Q4_1, sym=True -> Q4_0) or bits=8 with sym=True (-> Q8_0), "
        "group_size=32 (or a multiple of 32)")


def block_type(layer: Any, name: str) -> GGMLQuantizationType:
    """The GGUF block type that stores ``layer`` without re-quantizing, or a ConfigError saying what has one.

    ``layer`` is a :class:`PackedLinear` or anything with its ``bits``, ``group_size``, ``zeros``,
    ``in_features`` and ``input_scale`` (the writer's :class:`~.tensors.Packed`).
    """
    if layer.input_scale is not None:
        raise ConfigError(f"{name}: this packed layer multiplies its input by an AWQ scale that no preceding layer "
                          "absorbed; GGUF has no input scale. Exclude the layer from awq, or use gptq/rtn/hqq.")
    if layer.group_size % BLOCK or layer.in_features % BLOCK:
        raise ConfigError(f"{name}: group_size={layer.group_size} (in_features={layer.in_features}) has no GGUF "
                          f"block format: GGUF's Q4_0/Q4_1/Q8_0 blocks hold {BLOCK} weights of a row, so the group "
                          f"size and the row length must be multiples of {BLOCK}; {_FIX}.")
    zeros = layer.zeros.float()
    if layer.bits == 4:
        return GGMLQuantizationType.Q4_0 if bool((zeros == 8).all()) else GGMLQuantizationType.Q4_1
    if layer.bits == 8 and bool((zeros == 128).all()):
        return GGMLQuantizationType.Q8_0
    scheme = "8-bit asymmetric (zero points other than 128)" if layer.bits == 8 else f"{layer.bits}-bit"
    raise ConfigError(f"{name}: {scheme} weights have no GGUF twin (Q8_0 is symmetric; the K-quants store "
                      f"quantized scales); {_FIX}.")


def _per_block(values: torch.Tensor, group_size: int) -> torch.Tensor:
    """``[out, n_groups]`` -> ``[out, n_blocks, 1]``: each group's value repeated for each of its blocks."""
    return values.repeat_interleave(group_size // BLOCK, dim=1).unsqueeze(-1)


def _fp16_bytes(values: torch.Tensor) -> np.ndarray:
    return values.to(torch.float16).contiguous().numpy().view(np.uint8).reshape(*values.shape[:-1], 2)


def pack_blocks(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int,
                qtype: GGMLQuantizationType) -> np.ndarray:
    """Block bytes ``uint8 [..., out, in / 32 * block_bytes]`` of codes ``[..., out, in]`` with per-group scales/zeros.

    Leading dimensions (the experts of a 3-D weight) are kept.
    """
    lead, in_f = codes.shape[:-1], codes.shape[-1]
    codes = codes.reshape(-1, in_f)
    scales, zeros = scales.reshape(-1, scales.shape[-1]), zeros.reshape(-1, zeros.shape[-1])
    out_f = codes.shape[0]
    q = codes.to(torch.int16).view(out_f, in_f // BLOCK, BLOCK)
    d = _fp16_bytes(_per_block(scales.float(), group_size))
    if qtype == GGMLQuantizationType.Q8_0:
        body = (q - 128).to(torch.int8).numpy().view(np.uint8)
        parts = [d, body]
    else:
        body = (q[..., : BLOCK // 2] | (q[..., BLOCK // 2 :] << 4)).to(torch.uint8).numpy()
        parts = [d, body]
        if qtype == GGMLQuantizationType.Q4_1:
            m = -_per_block(zeros.float(), group_size) * _per_block(scales.float(), group_size)
            parts = [d, _fp16_bytes(m), body]
    return np.concatenate(parts, axis=-1).reshape(*lead, -1)
