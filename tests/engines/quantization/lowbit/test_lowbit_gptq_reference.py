"""quantize_gptq's blocked column sweep against a plain GPTQ written here: a column at a time, whole-matrix updates."""

from __future__ import annotations

import pytest
import torch

from slimkit.engines.quantization.lowbit import HessianAccumulator, quantize_gptq
from slimkit.engines.quantization.lowbit.gptq_columns import sweep_columns


def _params(w: torch.Tensor, maxq: int, sym: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Min-max scale (rounded to float16, as stored) and zero of each row of ``w``; 0 always representable."""
    lo, hi = w.min(1).values.clamp(max=0), w.max(1).values.clamp(min=0)
    if sym:
        scale = (2 * torch.maximum(-lo, hi) / maxq).clamp(min=2.0**-20).half().float()
        return scale, torch.full_like(scale, (maxq + 1) / 2)
    scale = ((hi - lo) / maxq).clamp(min=2.0**-20).half().float()
    return scale, torch.round(-lo / scale).clamp(0, maxq)


def reference_gptq(w, h, bits, group, sym, act_order, damp=0.01):
    """Textbook GPTQ: for each column in turn, its group's parameters (static groups under act order, else from the
    weights as they are when the group's first column comes up), its code, and its error spread onto every later
    column of the whole matrix at once."""
    w, h = w.clone().double(), h.clone().double()
    maxq, (out_f, in_f) = 2**bits - 1, w.shape
    groups = -(-in_f // group)
    scales, zeros = torch.zeros(out_f, groups, dtype=torch.float64), torch.zeros(out_f, groups, dtype=torch.float64)
    order = torch.arange(in_f)
    if act_order:
        for g in range(groups):
            scales[:, g], zeros[:, g] = _params(w[:, g * group : (g + 1) * group].float(), maxq, sym)
        order = torch.argsort(torch.diagonal(h).float(), descending=True)
    h = h[order][:, order] + damp * torch.diagonal(h).mean() * torch.eye(in_f, dtype=torch.float64)
    u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    w = w[:, order]
    codes = torch.zeros(out_f, in_f, dtype=torch.uint8)
    for i, col in enumerate(order.tolist()):
        g = col // group
        if not act_order and col % group == 0:
            scales[:, g], zeros[:, g] = _params(w[:, i : i + group].float(), maxq, sym)
        q = torch.clamp(torch.round(w[:, i] / scales[:, g] + zeros[:, g]), 0, maxq)
        codes[:, col] = q.to(torch.uint8)
        err = (w[:, i] - (q - zeros[:, g]) * scales[:, g]) / u[i, i]
        w[:, i:] -= err[:, None] * u[i, i:][None, :]
    return codes, scales.half(), zeros.half()


def _layer(out_f, in_f, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(out_f, in_f, generator=gen)
    x = torch.randn(4 * in_f, in_f, generator=gen) * torch.rand(in_f, generator=gen).mul(3).add(0.1)
    acc = HessianAccumulator(in_f)
    acc.add(x)
    return w, acc.h


@pytest.mark.parametrize(("in_f", "group", "block", "act_order", "sym"), [
    (256, 64, 128, False, True),    # several groups per block
    (192, 48, 64, False, False),   # groups straddling blocks
    (256, 128, 128, True, True),   # static groups, permuted columns: one sweep per block
    (160, 32, 64, True, False),
])
def test_blocked_sweep_matches_plain_gptq(in_f, group, block, act_order, sym):
    w, h = _layer(24, in_f)
    codes, scales, zeros = quantize_gptq(w, h, 4, group, sym=sym, act_order=act_order, block_size=block,
                                         clip_search=False)
    ref_codes, ref_scales, ref_zeros = reference_gptq(w, h, 4, group, sym, act_order)
    assert codes.shape == (24, in_f) and codes.dtype == torch.uint8
    # float32 blocks against a float64 whole-matrix sweep: only a code sitting on a rounding boundary may differ
    assert float((codes == ref_codes).float().mean()) > 0.995
    assert int((codes.int() - ref_codes.int()).abs().max()) <= 1
    torch.testing.assert_close(scales.float(), ref_scales.float(), rtol=2e-3, atol=0)
    torch.testing.assert_close(zeros.float(), ref_zeros.float(), rtol=0, atol=1.0)


def test_sweep_writes_codes_errors_and_updates_later_columns_in_place():
    gen = torch.Generator().manual_seed(3)
    tile, u = torch.randn(5, 7, generator=gen), torch.randn(5, 5, generator=gen).triu() + 3 * torch.eye(5)
    scales, zeros = torch.full((3, 7), 0.25), torch.full((3, 7), 8.0)
    codes, errors = torch.zeros(3, 7, dtype=torch.uint8), torch.zeros(3, 7)
    expect = tile.clone()
    sweep_columns(tile, u, scales, zeros, codes, errors, 3, 15.0)
    for c in range(3):  # the same three steps by hand, on the transposed tile (one row per column)
        q = torch.clamp(torch.round(expect[c] / 0.25 + 8), 0, 15)
        assert torch.equal(codes[c], q.to(torch.uint8))
        err = (expect[c] - (q - 8) * 0.25) / u[c, c]
        torch.testing.assert_close(errors[c], err)
        expect[c + 1 :] -= u[c, c + 1 :, None] * err[None, :]
    torch.testing.assert_close(tile[3:], expect[3:])  # the columns after the run received every error
