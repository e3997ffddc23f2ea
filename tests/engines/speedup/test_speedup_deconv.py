"""Transposed convolutions (a heatmap head's ``deconv_layers``) as channel consumers and producers."""

from __future__ import annotations

import copy

import pytest
import torch

from slimkit.engines.speedup import SpeedupError, UnsupportedOpError, apply_kept_channels
from tests.engines.speedup.speedup_models import (
    HeatmapNet,
    check_sparsity_zero,
    check_speedup,
    l1_rows,
    masked_reference,
    row_mask,
    run_speedup,
    seeded,
)

X = torch.randn(2, 3, 16, 16)


def test_deconv_head_shrinks_as_consumer_and_producer(tmp_path):
    model = seeded(HeatmapNet)
    masks = {"c2": row_mask(model.c2, l1_rows(model.c2.weight, 8)),  # read by d1: its weight loses dim-0 rows
             "d1": row_mask(model.d1, l1_rows(model.d1.weight.transpose(0, 1), 6)),  # output channels: dim 1
             "d2": row_mask(model.d2, [0, 2, 5, 7])}
    # by hand: c1 216 + bn 16; c2 8*8*9 + bn 16; d1 8*6*16 + bn 12; d2 6*4*9 + bias 4; final 4*5 + 5
    speedup, _ = check_speedup(HeatmapNet, model, X, masks, tmp_path, expect_params=232 + 592 + 780 + 220 + 25)
    assert tuple(model.d1.weight.shape) == (8, 6, 4, 4) and tuple(model.d2.weight.shape) == (6, 4, 3, 3)
    assert (model.d2.in_channels, model.d2.out_channels, model.final.in_channels) == (6, 4, 4)
    assert speedup.kept_channels["d2"] == {"out": [0, 2, 5, 7], "in": speedup.kept_channels["d1"]["out"]}
    assert model(X).shape == (2, 5, 16, 16)


def test_deconv_sparsity_zero_is_bit_identical():
    check_sparsity_zero(seeded(HeatmapNet), X)


def b3_output(model: torch.nn.Module) -> torch.Tensor:
    seen = []
    handle = model.b3.register_forward_hook(lambda m, args, out: seen.append(out))
    with torch.no_grad():
        model(X)
    handle.remove()
    return seen[0]


def test_deconv_folds_removed_constant_channels_by_their_mean():
    model = seeded(HeatmapNet)  # c2's pruned channels reach d1 as the constant relu(b2's shift)
    masks = {"c2": row_mask(model.c2, list(range(8)))}
    reference = b3_output(masked_reference(model, masks))
    b2 = model.b2
    shift = b2.bias - b2.running_mean * b2.weight / torch.sqrt(b2.running_var + b2.eps)
    plain, _ = run_speedup(copy.deepcopy(model), X, masks, fold_constants=False)
    small, speedup = run_speedup(model, X, masks)
    fold = next(f for f in speedup.folds if f.layer == "d1")
    assert (fold.channels, fold.target, fold.exact) == (int((shift[8:] > 0).sum()), "b3", False)
    assert small.d1.in_channels == plain.d1.in_channels == 8
    # the stride spreads the constant unevenly; the fold is its mean: b3's output is right on average per channel
    err_fold, err_plain = (b3_output(small) - reference).mean((0, 2, 3)), (b3_output(plain) - reference).mean((0, 2, 3))
    assert err_fold.abs().max() < 1e-5 < 0.01 < err_plain.abs().max()


def test_grouped_deconv_keeps_its_channels_and_is_refused_clearly():
    model = seeded(lambda: HeatmapNet(groups=2))
    with pytest.raises(UnsupportedOpError, match=r"ConvTranspose2d.*groups=2"):
        run_speedup(model, X, {"c2": row_mask(model.c2, list(range(8)))})
    with pytest.raises(SpeedupError, match="transposed convolutions with groups=1 only"):
        apply_kept_channels(seeded(lambda: HeatmapNet(groups=2)), {"d1": {"out": [0, 1], "in": list(range(16))}})
