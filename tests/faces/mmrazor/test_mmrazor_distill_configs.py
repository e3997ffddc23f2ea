"""Classification distillation configs written in MMRazor's format build around the user's models and train.

Each test loads one of ``configs/distill/cls``, builds ``cfg.model`` with small MMCls-shaped ResNets
(``mm_models.py``) in place of the models the config names, checks the loss dict, recomputes a loss value from
the loss class itself where it can, and trains until the loss falls (``mm_models.trains``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from slimkit.razor import (
    ImgDataPreprocessor,
    OverhaulFeatureDistillation,
    SingleTeacherDistill,
    build,
    load_config,
    skipped_bases,
)
from slimkit.training.distill import (
    WSLD,
    DistanceWiseRKD,
    DISTLoss,
    DKDLoss,
    KLDivergence,
    OFDTeacherConnector,
)
from tests.faces.mmrazor.mm_models import images, resnet, trains, wrn

CLS = Path(__file__).parent / "configs" / "distill" / "cls"


def logits_of(algo: SingleTeacherDistill, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(student logits, teacher logits) on ``x`` after the algorithm's preprocessing, in eval mode."""
    algo.eval()
    x = algo.data_preprocessor(x) if algo.data_preprocessor is not None else x
    with torch.no_grad():
        return algo.architecture(x), algo.teacher(x)


def loss_value(algo: SingleTeacherDistill, batch: tuple, key: str) -> float:
    algo.eval()
    with torch.no_grad():
        return float(algo(*batch, mode="loss")[key])


def kd_pair(name: str) -> SingleTeacherDistill:
    return build(load_config(CLS / name).model, architecture=resnet(18), teacher=resnet(34, seed=1))


def test_kd_config_reads_its_bases_and_computes_hintons_loss(caplog):
    with caplog.at_level(logging.INFO):
        cfg = load_config(CLS / "kd_logits_resnet.py")
        algo = build(cfg.model, architecture=resnet(18), teacher=resnet(34, seed=1))
    assert skipped_bases(cfg) == ["mmcls::_base_/datasets/imagenet_bs32.py", "mmcls::_base_/default_runtime.py"]
    assert "teacher_ckpt='https://models.example.com/" in caplog.text  # logged, never fetched
    assert cfg.val_cfg == {"type": "mmrazor.SingleTeacherDistillValLoop"}
    # the preprocessor came from configs/_base_/preprocessors.py through the mmrazor:: scope
    pre = algo.data_preprocessor
    assert isinstance(pre, ImgDataPreprocessor)
    x = images(1)[0][0]
    mean, std = torch.tensor([128.0, 120.0, 112.0]), torch.tensor([64.0, 60.0, 56.0])
    torch.testing.assert_close(pre(x), (x.flip(1) - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1))

    data = images()
    trains(algo, data, {"student.loss", "distill.loss_soft"})
    s, t = logits_of(algo, data[0][0])
    assert loss_value(algo, data[0], "distill.loss_soft") == pytest.approx(
        float(KLDivergence(tau=2, loss_weight=1.5)(s, t)), rel=1e-5)


def test_dist_config_replaces_the_inherited_loss():
    cfg = load_config(CLS / "dist_logits_relations.py")  # _base_ = './kd_logits_resnet.py' (one string)
    assert list(cfg.model.distiller.distill_losses) == ["loss_dist"]  # _delete_=True dropped loss_soft
    assert list(cfg.model.distiller.loss_forward_mappings) == ["loss_dist"]
    assert cfg.model.teacher_ckpt.endswith("resnet34_small_teacher.pth")  # the rest is inherited
    assert cfg.model.data_preprocessor.bgr_to_rgb is True
    assert cfg.optim_wrapper.optimizer.nesterov is True
    algo = build(cfg.model, architecture=resnet(18), teacher=resnet(34, seed=1))
    data = images()
    trains(algo, data, {"student.loss", "distill.loss_dist"})
    s, t = logits_of(algo, data[0][0])
    expected = DISTLoss(inter_loss_weight=1.0, intra_loss_weight=2.0, tau=1, loss_weight=1.0)(s, t)
    assert loss_value(algo, data[0], "distill.loss_dist") == pytest.approx(float(expected), rel=1e-5)


def test_dkd_config_reads_the_labels_the_student_is_trained_on():
    """``ModuleInputs('head.loss_module')`` (data_idx=1): the labels of the batch, though no such module runs."""
    algo = kd_pair("dkd_logits_with_labels.py")
    data = images()
    trains(algo, data, {"student.loss", "distill.loss_decoupled"})
    x, y = data[0]
    s, t = logits_of(algo, x)
    got = loss_value(algo, (x, y), "distill.loss_decoupled")
    dkd = DKDLoss(tau=2, beta=2.0, reduction="mean")
    assert got == pytest.approx(float(dkd(s, t, y)), rel=1e-5)
    assert got != pytest.approx(float(dkd(s, t, (y + 1) % 10)), rel=1e-3)  # other labels, another value


def test_wsld_config_inherits_the_recorders_and_swaps_the_loss():
    cfg = load_config(CLS / "wsld_logits_with_labels.py")
    assert set(cfg.model.distiller.student_recorders) == {"logits", "labels"}
    assert list(cfg.model.distiller.distill_losses) == ["loss_weighted"]
    algo = build(cfg.model, architecture=resnet(18), teacher=resnet(34, seed=1))
    data = images()
    trains(algo, data, {"student.loss", "distill.loss_weighted"})
    x, y = data[0]
    s, t = logits_of(algo, x)
    expected = WSLD(tau=3, loss_weight=2.0)(s, t, y)
    assert loss_value(algo, (x, y), "distill.loss_weighted") == pytest.approx(float(expected), rel=1e-5)


def test_rkd_config_compares_distances_and_angles_of_pooled_features():
    algo = kd_pair("rkd_pooled_relations.py")
    data = images()
    trains(algo, data, {"student.loss", "distill.loss_distance", "distill.loss_angle"})
    algo.eval()
    x = algo.data_preprocessor(data[0][0])
    with torch.no_grad():
        fs = algo.architecture.neck(algo.architecture.backbone(x))
        ft = algo.teacher.neck(algo.teacher.backbone(x))
    assert fs.shape == (4, 128) and ft.shape == (4, 128)
    expected = DistanceWiseRKD(with_l2_norm=True, loss_weight=20)(fs, ft)
    assert loss_value(algo, data[0], "distill.loss_distance") == pytest.approx(float(expected), rel=1e-5)


def test_fitnets_config_widens_the_student_hints_to_the_teachers():
    cfg = load_config(CLS / "fitnets_hints_and_logits.py")
    # the teacher named here merges into the pair of configs/_base_/resnet18_from_resnet34.py
    assert cfg.model.teacher == {"cfg_path": "mmcls::resnet/resnet50_8xb32_in1k.py", "pretrained": False}
    assert cfg.model.architecture.cfg_path == "mmcls::resnet/resnet18_8xb32_in1k.py"
    algo = build(cfg.model, architecture=resnet(18), teacher=resnet(50, seed=1))
    hint4, hint3 = algo.distiller.connectors["hint4"], algo.distiller.connectors["hint3"]
    assert isinstance(hint4.conv_module[1], torch.nn.BatchNorm2d)  # norm_cfg=dict(type='BN') was read, not built
    # the connectors take the student's stage outputs to the teacher's widths (64 px: stage 4 is 2x2)
    x = algo.data_preprocessor(images(1, size=64)[0][0])
    with torch.no_grad():
        student, teacher = algo.architecture.backbone.stages(x), algo.teacher.backbone.stages(x)
        assert hint3(student[2]).shape == teacher[2].shape == (4, 256, 4, 4)
        assert hint4(student[3]).shape == teacher[3].shape == (4, 512, 2, 2)
    before = hint4.conv_module[0].weight.detach().clone()
    trains(algo, images(size=64), {"student.loss", "distill.loss_hint4", "distill.loss_hint3", "distill.loss_soft"})
    assert not torch.equal(before, hint4.conv_module[0].weight)  # the connectors train with the student


def test_ofd_config_sets_margins_from_the_teachers_batch_norms():
    cfg = load_config(CLS / "ofd_wide_resnet.py")
    algo = build(cfg.model, architecture=wrn(10, 1), teacher=wrn(10, 2, seed=1))
    assert isinstance(algo, OverhaulFeatureDistillation)
    margins = [algo.distiller.connectors[f"margin{i}"] for i in range(3)]
    assert all(isinstance(m, OFDTeacherConnector) for m in margins)
    assert [tuple(m.margin.shape) for m in margins] == [(1, 32, 1, 1), (1, 64, 1, 1), (1, 128, 1, 1)]
    assert all(bool((m.margin < 0).all()) for m in margins)  # E[x | x < 0] of each channel
    widen = algo.distiller.connectors["widen2"]
    assert widen(torch.rand(2, 64, 8, 8)).shape == (2, 128, 8, 8)
    trains(algo, images(size=16), {"student.loss", "distill.loss_ofd0", "distill.loss_ofd1", "distill.loss_ofd2"})


def test_a_config_model_that_is_not_substituted_says_what_to_pass():
    cfg = load_config(CLS / "kd_logits_resnet.py")
    with pytest.raises(Exception, match=r"architecture=dict\(cfg_path='mmcls::resnet/resnet18_8xb32_in1k.py'\).*"
                                        r"build\(cfg, architecture=your_model\)"):
        build(cfg.model, teacher=resnet(34))
