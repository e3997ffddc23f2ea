from __future__ import annotations

import copy

import pytest
import torch

from slimkit.engines.speedup import channel_dependency_report
from tests.engines.speedup.speedup_models import (
    ConcatNet,
    FlattenNet,
    ResNetTiny,
    check_sparsity_zero,
    check_speedup,
    l1_rows,
    param_count,
    row_mask,
    run_speedup,
    seeded,
)


def test_resnet_inner_and_residual_group(tmp_path):
    model, x = seeded(ResNetTiny), torch.randn(2, 3, 16, 16)
    l1_keep, l2_keep = l1_rows(model.l1.c1.weight, 8), l1_rows(model.l2.c1.weight, 16)
    res_keep = l1_rows(model.l2.c2.weight, 16)  # the stage-2 residual group agrees on its kept channels
    masks = {"l1.c1": row_mask(model.l1.c1, l1_keep), "l2.c1": row_mask(model.l2.c1, l2_keep),
             "l2.c2": row_mask(model.l2.c2, res_keep), "l2.down.0": row_mask(model.l2.down[0], res_keep)}
    # by hand: l1.c1 16->8, l2.c1 32->16, stage-2 output 32->16 (c2, down conv, both BNs, fc inputs)
    expected = (448 + 32) + (1152 + 16 + 1152 + 32) + (2304 + 32 + 2304 + 32 + 256 + 32) + (16 * 10 + 10)
    speedup, _ = check_speedup(ResNetTiny, model, x, masks, tmp_path, expect_params=expected)
    kept = speedup.kept_channels
    assert kept["l1.c1"]["out"] == l1_keep and kept["l1.c2"]["in"] == l1_keep and kept["l1.b1"]["out"] == l1_keep
    for name in ("l2.c2", "l2.down.0", "l2.b2", "l2.down.1"):
        assert kept[name]["out"] == res_keep
    assert kept["fc"]["in"] == res_keep and len(kept["fc"]["out"]) == 10
    assert "stem.0" not in kept and "l1.c2" in kept and len(kept["l1.c2"]["out"]) == 16
    assert speedup.warnings == []


def test_resnet_sparsity_zero_is_bit_identical():
    check_sparsity_zero(seeded(ResNetTiny), torch.randn(2, 3, 16, 16))


def test_residual_union_keeps_channels_and_warns():
    model, x = seeded(ResNetTiny), torch.randn(1, 3, 8, 8)
    masks = {"l2.c2": row_mask(model.l2.c2, list(range(16)))}  # l2.down.0 is unmasked: it keeps all 32
    with pytest.warns(UserWarning, match=r"l2\.c2: mask removes 16 of 32 output channels; 0 removed .*coupled "
                                         r"with \['l2\.down\.0'\]"):
        _, speedup = run_speedup(model, x, masks)
    assert speedup.kept_channels == {} and model.l2.c2.out_channels == 32


def test_residual_union_of_disagreeing_masks():
    model, x = seeded(ResNetTiny), torch.randn(1, 3, 8, 8)
    masks = {"l2.c2": row_mask(model.l2.c2, list(range(0, 20))), "l2.down.0": row_mask(model.l2.down[0],
                                                                                         list(range(10, 24)))}
    with pytest.warns(UserWarning, match="coupled"):
        _, speedup = run_speedup(model, x, masks)
    assert speedup.kept_channels["l2.c2"]["out"] == list(range(24)) == speedup.kept_channels["fc"]["in"]


def test_mobilenet_v2_zoo_depthwise_and_inverted_residuals(tmp_path):
    from slimkit.zoo import build, load

    model, image = load("mobilenet_v2", batch_size=1)
    x = image[:, :, 96:128, 96:128].contiguous()  # a 32x32 crop of the real photo keeps the test fast
    masks, hidden = {}, {}
    for i in range(2, 18):  # every expand conv: keep the half with the largest L1 (depthwise convs follow)
        conv = model.features[i].conv[0][0]
        hidden[i] = l1_rows(conv.weight, conv.out_channels // 2)
        masks[f"features.{i}.conv.0.0"] = row_mask(conv, hidden[i])
    stage = l1_rows(model.features[2].conv[2].weight, 12)  # the 24-channel residual stage, both producers
    for i in (2, 3):
        masks[f"features.{i}.conv.2"] = row_mask(model.features[i].conv[2], stage)
    speedup, before = check_speedup(lambda: build("mobilenet_v2"), model, x, masks, tmp_path, anchor=False)
    kept = speedup.kept_channels
    for i, rows in hidden.items():
        assert kept[f"features.{i}.conv.1.0"]["in"] == rows == kept[f"features.{i}.conv.1.0"]["out"]
        assert kept[f"features.{i}.conv.2"]["in"] == rows
        assert model.features[i].conv[1][0].groups == len(rows)
    assert kept["features.4.conv.0.0"]["in"] == stage and kept["features.3.conv.1.1"]["out"] == hidden[3]
    assert param_count(model) < 0.75 * param_count(before)


def test_mobilenet_v2_sparsity_zero_is_bit_identical():
    from slimkit.zoo import build

    torch.manual_seed(0)
    check_sparsity_zero(build("mobilenet_v2").eval(), torch.randn(1, 3, 16, 16))


def test_concat_channel_offsets(tmp_path):
    model, x = seeded(ConcatNet), torch.randn(2, 3, 8, 8)
    keep_a, keep_b = [0, 2, 5, 7], [1, 2, 3, 4, 6, 7]
    masks = {"a": row_mask(model.a, keep_a), "b": row_mask(model.b, keep_b)}
    speedup, _ = check_speedup(ConcatNet, model, x, masks, tmp_path)
    # input channels 0..2 come from the raw image (never pruned), then a at offset 3, then b at offset 11
    assert speedup.kept_channels["fuse"]["in"] == [0, 1, 2] + [3 + i for i in keep_a] + [11 + i for i in keep_b]
    assert model.fuse.in_channels == 13


def test_concat_sparsity_zero_is_bit_identical():
    check_sparsity_zero(seeded(ConcatNet), torch.randn(2, 3, 8, 8))


def test_flatten_to_linear_feature_mapping(tmp_path):
    model, x = seeded(FlattenNet), torch.randn(4, 1, 6, 6)
    keep = l1_rows(model.conv.weight, 5)
    speedup, _ = check_speedup(FlattenNet, model, x, {"conv": row_mask(model.conv, keep)}, tmp_path,
                              expect_params=(5 * 9 + 5) + (45 * 16 + 16) + (16 * 10 + 10))
    assert speedup.kept_channels["fc1"]["in"] == [c * 9 + s for c in keep for s in range(9)]
    assert model.fc1.in_features == 45


def test_flatten_sparsity_zero_is_bit_identical():
    check_sparsity_zero(seeded(FlattenNet), torch.randn(4, 1, 6, 6))


def test_channel_dependency_report_groups_and_table():
    model = seeded(ResNetTiny)
    report = channel_dependency_report(model, torch.randn(1, 3, 8, 8))
    assert ["stem.0", "l1.c2"] in report and ["l2.c2", "l2.down.0"] in report and ["l1.c1"] in report
    info = report.infos[report.index(["l2.c2", "l2.down.0"])]
    assert info.channels == 32 and info.followers == ["l2.b2", "l2.down.1"] and info.consumers == ["fc"]
    table = str(report)
    assert table.splitlines()[0].split() == ["#", "kind", "channels", "layers", "pruned", "together", "followers",
                                             "consumers", "constraints"]
    assert "kept: model output" in table.splitlines()[[r == ["fc"] for r in report].index(True) + 2]
    assert all(m.training is False for m in model.modules())


def test_tracing_leaves_training_mode_and_bn_statistics_alone():
    model = seeded(ResNetTiny).train()
    stats = model.l1.b1.running_mean.clone()
    channel_dependency_report(model, torch.randn(2, 3, 8, 8))
    assert model.training and model.l1.b1.training and torch.equal(model.l1.b1.running_mean, stats)


@pytest.mark.cuda
def test_speedup_on_cuda_matches_cpu():
    cpu_model, x = seeded(ResNetTiny), torch.randn(2, 3, 16, 16)
    gpu_model = copy.deepcopy(cpu_model).cuda()
    masks = {"l1.c1": row_mask(cpu_model.l1.c1, l1_rows(cpu_model.l1.c1.weight, 8))}  # CPU masks for a GPU model
    _, cpu_speedup = run_speedup(cpu_model, x, masks)
    _, gpu_speedup = run_speedup(gpu_model, x.cuda(), masks)
    assert gpu_speedup.kept_channels == cpu_speedup.kept_channels and gpu_model.l1.c1.weight.is_cuda
    assert gpu_model.l1.c1.out_channels == 8
    with torch.no_grad():
        torch.testing.assert_close(gpu_model(x.cuda()).cpu(), cpu_model(x), atol=1e-4, rtol=1e-4)


def test_report_table_cuts_long_member_lists():
    from slimkit.zoo import build

    report = channel_dependency_report(build("mobilenet_v2").eval(), torch.randn(1, 3, 32, 32))
    stage = next(i for i, g in enumerate(report) if g[0] == "features.7.conv.2")
    assert len(report[stage]) == 4
    row = report.table(max_names=2).splitlines()[stage + 2]
    assert "features.7.conv.2, features.8.conv.2, ... (+2 more)" in row and "features.9" not in row
