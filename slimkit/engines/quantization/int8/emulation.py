"""fbgemm's AVX2 dynamic int8 GEMM, emulated exactly in plain torch: int8 quality on AVX2 measured on any CPU.

The AVX2 (and plain AVX-512) u8s8 kernel broadcasts four consecutive activation bytes ``k..k+3`` against weight
rows packed four at a time (row interleave 4), then ``vpmaddubsw`` multiplies uint8 activations by int8 weights
and adds *adjacent pairs* ``(k = 2i, 2i+1)`` into int16 with saturation to ``[-32768, 32767]``;
``vpmaddwd`` with ones widens the pair sums to int32, where the rest accumulates exactly. Activations are
quantized per call as ``torch.ops.quantized.linear_dynamic`` does (per-tensor asymmetric uint8 over 0..255, or
0..127 with ``reduce_range``), and the int32 result is rescaled with the zero-point correction
``x_scale * w_scale * (acc - x_zero * sum_k q_w) + bias`` (one rounding, as its fused multiply-add): outputs
match fbgemm's bit for bit (checked against ``FBGEMM_ENABLE_INSTRUCTIONS=AVX2`` kernels).

The exact sum is one float64 matmul (integers below 2**53 are exact); saturation can only change a pair whose
two weight codes, times the largest activation code, exceed 32767 in magnitude, and only those pairs are
evaluated one by one. torch.ao's own dynamic ``Linear`` (always 7-bit activations) is emulated too, and so is
:class:`PerTokenInt8Linear` (each token divided by its absolute maximum before the kernel, its output row scaled back).
"""

from __future__ import annotations

import copy

import torch
import torch.ao.nn.quantized.dynamic as nnqd

from slimkit.engines.quantization.int8.linear import Int8Linear
from slimkit.engines.quantization.int8.per_token import PerTokenInt8Linear, token_scales

INT16_MIN, INT16_MAX = -32768, 32767


def quantize_activations(x: torch.Tensor, reduce_range: bool) -> tuple[torch.Tensor, float, int]:
    """uint8 codes (as int64), scale and zero point of ``x [rows, K]``, chosen as fbgemm's dynamic Linear does."""
    scale, zero = torch._choose_qparams_per_tensor(x, reduce_range)
    codes = torch.quantize_per_tensor(x, scale, zero, torch.quint8).int_repr().long()
    return codes, float(scale), int(zero)


def avx2_int8_matmul(codes: torch.Tensor, weight_codes: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """``codes [rows, K] (0..255) @ weight_codes [out, K] (-128..127)^T`` with AVX2's int16 pair saturation.

    Returns the int32 accumulator values as int64 ``[rows, out]``.
    """
    a, w = codes.long(), weight_codes.long()
    if a.shape[1] % 2:  # fbgemm pads K with zeros
        a, w = torch.nn.functional.pad(a, (0, 1)), torch.nn.functional.pad(w, (0, 1))
    acc = (a.double() @ w.double().T).round().long()
    top = int(a.max()) if a.numel() else 0
    risky = (w[:, 0::2].abs() + w[:, 1::2].abs()) * top > INT16_MAX
    rows, pairs = risky.nonzero(as_tuple=True)  # (output channel, pair index) that can saturate
    for start in range(0, rows.numel(), chunk):
        o, i = rows[start : start + chunk], pairs[start : start + chunk]
        exact = a[:, 2 * i] * w[o, 2 * i] + a[:, 2 * i + 1] * w[o, 2 * i + 1]  # [rows, chunk]
        acc.index_add_(1, o, exact.clamp(INT16_MIN, INT16_MAX) - exact)
    return acc


class EmulatedAvx2Linear(torch.nn.Module):
    """A dynamic int8 Linear computed as fbgemm's AVX2 kernel computes it (same quantization, same saturation).

    Takes an :class:`Int8Linear` (per-token ones too) or torch.ao's dynamic ``Linear`` (symmetric qint8 weights,
    per channel or per tensor; torch.ao's forward always uses 7-bit activations).
    """

    def __init__(self, module: nnqd.Linear) -> None:
        super().__init__()
        weight = module.weight()
        if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            scale, zero = weight.q_per_channel_scales().float(), weight.q_per_channel_zero_points()
        else:
            scale = torch.full((weight.shape[0],), float(weight.q_scale()))
            zero = torch.tensor([weight.q_zero_point()])
        if bool(zero.ne(0).any()):
            raise ValueError("fbgemm's dynamic Linear takes symmetric int8 weights (zero point 0).")
        self.register_buffer("weight_codes", weight.int_repr().long())
        self.register_buffer("weight_scale", scale)
        bias = module.bias()
        self.register_buffer("bias", None if bias is None else bias.detach().float())
        self.reduce_range = bool(getattr(module, "reduce_range", True))
        self.per_token = isinstance(module, PerTokenInt8Linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Quantize ``x`` per tensor (per token), multiply with pair saturation, rescale; returns ``x``'s dtype."""
        flat = x.detach().reshape(-1, x.shape[-1]).float()
        rows = token_scales(flat) if self.per_token and flat.shape[0] > 1 else None
        if rows is not None:
            flat = flat / rows
        codes, scale, zero = quantize_activations(flat, self.reduce_range)
        acc = avx2_int8_matmul(codes, self.weight_codes)
        acc = acc - zero * self.weight_codes.sum(dim=1)[None, :]
        multiplier = torch.tensor(scale, dtype=torch.float32) * self.weight_scale  # fp32, as fbgemm's
        y = acc.double() * multiplier.double()[None, :]  # one rounding, like its fused multiply-add epilogue
        if self.bias is not None:
            y = y + self.bias.double()
        y = y.float()
        if rows is not None:  # as PerTokenInt8Linear: the bias out, each row times its token's scale, the bias back
            y = y * rows if self.bias is None else torch.addcmul(self.bias, y - self.bias, rows)
        return y.reshape(*x.shape[:-1], -1).to(x.dtype)


def emulate_avx2(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose dynamic int8 Linear layers compute as on an AVX2-only CPU (the input is kept)."""
    copied = copy.deepcopy(model)
    for name, module in list(copied.named_modules()):
        if type(module) in (Int8Linear, PerTokenInt8Linear, nnqd.Linear):
            emulated = EmulatedAvx2Linear(module)
            # per-token layers pick their activation bits where they run (from_dynamic): 7 on an AVX2-only CPU
            emulated.reduce_range |= emulated.per_token
            copied.set_submodule(name, emulated)
    return copied
