"""Matmul paths for :class:`PackedLinear` that avoid building the dense dequantised weight.

- CUDA: :mod:`.int4_dispatch` measures, per layer shape and row bucket, our Triton int4 GEMV/GEMM, PyTorch's
  int4 kernel (tinygemm) and the dequantised weight with one dense GEMM, and runs the fastest.
- CPU, up to ``native.MAX_ROWS`` tokens (decode): the fused C kernel of :mod:`.native` (unpack in registers,
  multiply, accumulate per group; AVX-512 or AVX2 build, ``SLIMKIT_NATIVE_ISA``), called through
  :func:`.native.layer_matmul` with the layer's arguments prepared once (SmolLM2-135M 4-bit decodes 1.6-1.8x
  fp32 tokens/s on 2 threads, see docs/benchmarks.md).
- CPU, longer inputs (prefill): the C kernel dequantises the weight in one vectorised pass into planar column
  order, the input's columns are permuted to match, and one dense matmul follows (~5x faster than dequantising
  with torch ops; 1.5-2.2x fp32 time at 32-128 tokens on SmolLM2-sized layers).
- CPU, bf16/fp16 activations: cast to float32 explicitly, one of the paths above, output cast back (bf16
  matmuls are several times slower than float32 on CPUs without AMX).
- CPU, small batches when the C kernel is unavailable (no compiler, ``SLIMKIT_NATIVE=0``): the packed bytes
  are masked into bit planes (no shifts: each plane's power of two moves to the input side) and cast to float
  once, unscaled; one matmul against a block-diagonal copy of the input (one row per token and group) gives
  per-group partial sums, so group scales and zeros are applied to ``[tokens, groups, out]`` sums instead of
  to every weight. That keeps the op count (Python overhead dominates at these sizes) near 20 for any width.

Each returns ``None`` when it does not apply; the caller then dequantises.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from slimkit.engines.quantization.lowbit import int4_dispatch, native
from slimkit.engines.quantization.lowbit.protocol import PackedLayer

#: largest number of tokens (rows of x) for which the CPU plane path is used; above it dequantising wins
CPU_SMALL_BATCH = 4


def packed_matmul(layer: PackedLayer, x: torch.Tensor) -> torch.Tensor | None:
    """``x @ W^T + b`` from the packed weight through a low-bit path, or ``None`` if none applies."""
    if x.is_cuda:
        return int4_dispatch.matmul(layer, x)
    rows = x.numel() // max(x.shape[-1], 1)
    if x.is_cpu and x.dtype in HALF_DTYPES and rows and not x.requires_grad:
        return _half_on_cpu(layer, x)
    if x.is_cpu and x.dtype == torch.float32 and rows:
        if rows <= native.MAX_ROWS:
            out = native.layer_matmul(layer, x)  # decode: the hot path, kept free of reshapes
            if out is not None:
                return out
        else:
            out = native.planar_matmul(x.reshape(rows, x.shape[-1]), layer.qweight, layer.scales, layer.zeros,
                                       layer.bits, layer.group_size, layer.in_features, layer.bias)
            if out is not None:
                return out.view(*x.shape[:-1], layer.out_features)
    if x.device.type == "cpu" and x.dtype == torch.float32 and rows <= CPU_SMALL_BATCH:
        return _cpu_planes(layer, x)
    return None


#: activation dtypes the CPU paths take through an explicit float32 cast
HALF_DTYPES = (torch.bfloat16, torch.float16)


def _half_on_cpu(layer: PackedLayer, x: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 activations on the CPU: cast to float32, run the float32 path, cast the output back.

    CPUs without AMX/AVX512-BF16 run bf16 matmuls several times slower than float32 (Zen 3: ~8x), so an explicit
    cast of the activations (not of the weights) is the fast way; the cost is two elementwise casts per layer.
    """
    xf = x.float()
    out = packed_matmul(layer, xf)
    if out is None:
        out = F.linear(xf, layer.dequantize(torch.float32), None if layer.bias is None else layer.bias.float())
    return out.to(x.dtype)


# ---------------------------------------------------------------------------------------------- CPU planes
#: bits -> (values per packing unit, bytes per unit, planes per byte): plane ``(mask, value, factor)`` of byte ``b``
#: means ``(byte_b & mask) * factor`` is that value's contribution (a 3-bit value straddling two bytes takes two
#: planes; mask 0 pads every byte to the same plane count so all planes come from one broadcast op)
PLANES: dict[int, tuple[int, int, list[list[tuple[int, int, float]]]]] = {
    8: (1, 1, [[(0xFF, 0, 1.0)]]),
    4: (2, 1, [[(0x0F, 0, 1.0), (0xF0, 1, 2.0**-4)]]),
    2: (4, 1, [[(0x03 << (2 * j), j, 4.0**-j) for j in range(4)]]),
    3: (8, 3, [[(0x07, 0, 1.0), (0x38, 1, 2.0**-3), (0xC0, 2, 2.0**-6), (0x00, 0, 0.0)],
               [(0x01, 2, 4.0), (0x0E, 3, 2.0**-1), (0x70, 4, 2.0**-4), (0x80, 5, 2.0**-7)],
               [(0x03, 5, 2.0), (0x1C, 6, 2.0**-2), (0xE0, 7, 2.0**-5), (0x00, 0, 0.0)]]),
}
_CONSTANTS: dict[tuple, tuple[torch.Tensor, ...]] = {}


def _constants(bits: int, groups: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Masks ``[bytes, planes]``, value index and factor per plane, and ``eye(groups)`` (cached per device)."""
    key = (bits, groups, str(device))
    if key not in _CONSTANTS:
        table = PLANES[bits][2]
        flat = [p for row in table for p in row]
        _CONSTANTS[key] = (
            torch.tensor([[p[0] for p in row] for row in table], dtype=torch.uint8, device=device),
            torch.tensor([p[1] for p in flat], device=device),
            torch.tensor([p[2] for p in flat], dtype=torch.float32, device=device),
            torch.eye(groups, dtype=torch.float32, device=device),
        )
    return _CONSTANTS[key]


def _cpu_planes(layer: PackedLayer, x: torch.Tensor) -> torch.Tensor:
    """Small-batch matmul on the packed codes (see the module doc): three passes over the weight for any width."""
    lead, k, out_f = x.shape[:-1], layer.in_features, layer.out_features
    rows = x.reshape(-1, k)
    m, gs, groups = rows.shape[0], layer.group_size, layer.scales.shape[1]
    per, nbytes, _ = PLANES[layer.bits]
    units = layer.qweight.shape[1] // nbytes
    masks, value_idx, factors, eye = _constants(layer.bits, groups, x.device)
    # codes: every plane of every byte in ONE masking op ([byte, plane, out, unit]; bytes are stored planar), then
    # one cast to float (unscaled); few large ops matter because each is a parallel region
    packed = layer.qweight.view(out_f, nbytes, units).transpose(0, 1).unsqueeze(1)
    planes = packed if layer.bits == 8 else packed & masks.view(nbytes, -1, 1, 1)
    codes = planes.to(x.dtype).view(-1, out_f, units)
    # input: block-diagonal copy (one row per token and group), then each plane's value times its factor
    width = max(groups * gs, units * per)
    xg = F.pad(rows, (0, groups * gs - k)).view(m, groups, gs)
    xb = (xg.unsqueeze(1) * eye.view(1, groups, groups, 1)).view(m * groups, groups * gs)
    if width > groups * gs:
        xb = F.pad(xb, (0, width - groups * gs))
    xb = xb.view(m * groups, width // per, per)[:, :units].permute(2, 0, 1)[value_idx] * factors.view(-1, 1, 1)
    acc = torch.bmm(xb, codes.transpose(1, 2)).sum(0).view(m, groups, out_f)
    # y = sum_g s * (sum_k x q - z * sum_k x), with float16 scales/zeros promoted elementwise
    y = ((acc - xg.sum(-1).unsqueeze(-1) * layer.zeros.t()) * layer.scales.t()).sum(1)
    if layer.bias is not None:
        y = y + layer.bias.to(x.dtype)
    return y.view(*lead, out_f)
