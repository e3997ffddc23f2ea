"""MMRazor's own distillation config files build and train with the user's models substituted.

The configs are vendored unchanged in tests/fixtures/mmrazor (see its README). Each test loads one as shipped,
builds ``cfg.model`` around small MMCls/MMDet/MMSeg-shaped models (tests/razor/mm_models.py), trains a few
steps and checks the loss dict the config implies -- and, where the value can be recomputed, its value.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from slimkit.razor import (
    FpnTeacherDistill,
    ImgDataPreprocessor,
    OverhaulFeatureDistillation,
    SingleTeacherDistill,
    build,
    load_config,
    separate_optimizers,
)
from slimkit.training.distill import DKDLoss, KLDivergence, OFDTeacherConnector
from tests.razor.mm_models import TinyDetector, TinySegmentor, images, resnet, trains, wrn

CONFIGS = Path(__file__).parents[1] / "fixtures" / "mmrazor" / "configs"
CLS = CONFIGS / "distill" / "mmcls"


def logits_of(algo: SingleTeacherDistill, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = algo.data_preprocessor(x) if algo.data_preprocessor is not None else x
    with torch.no_grad():
        return algo.architecture(x), algo.teacher(x)


def test_kd_config_builds_and_its_loss_is_hintons(caplog):
    cfg = load_config(CLS / "kd" / "kd_logits_resnet34_resnet18_8xb32_in1k.py")
    with caplog.at_level(logging.INFO):
        algo = build(cfg.model, architecture=resnet(18, base=16), teacher=resnet(34, base=16, seed=1))
    assert "teacher_ckpt='https://download.openmmlab.com" in caplog.text  # the URL is not fetched
    assert isinstance(algo, SingleTeacherDistill) and isinstance(algo.data_preprocessor, ImgDataPreprocessor)
    data = images()
    losses = trains(algo, data, {"student.loss", "distill.loss_kl"})
    algo.eval()
    s, t = logits_of(algo, data[0][0])
    expected = KLDivergence(tau=1, loss_weight=3)(s, t)
    with torch.no_grad():
        got = float(algo(*data[0], mode="loss")["distill.loss_kl"])
    assert got == pytest.approx(float(expected), rel=1e-5)
    assert float(losses["distill.loss_kl"].detach()) > 0


@pytest.mark.parametrize("name,keys", [
    ("dkd/dkd_resnet34_resnet18_8xb32_in1k.py", {"distill.loss_dkd"}),
    ("wsld/wsld_logits_resnet34_resnet18_8xb32_in1k.py", {"distill.loss_wsld"}),
    ("dist/dist_logits_resnet34_resnet18_8xb32_in1k.py", {"distill.loss_kl"}),
    ("rkd/rkd_neck_resnet34_resnet18_8xb32_in1k.py", {"distill.loss_dw", "distill.loss_aw"}),
])
def test_logit_and_relation_configs_train(name, keys):
    cfg = load_config(CLS / name)
    algo = build(cfg.model, architecture=resnet(18, base=16), teacher=resnet(34, base=16, seed=1))
    trains(algo, images(), {"student.loss", *keys})


def test_dkd_reads_the_labels_of_the_batch_the_student_sees():
    """DKD's gt_labels come from ModuleInputs('head.loss_module'), which a slimkit student never calls."""
    cfg = load_config(CLS / "dkd" / "dkd_resnet34_resnet18_8xb32_in1k.py")
    algo = build(cfg.model, architecture=resnet(18, base=16), teacher=resnet(34, base=16, seed=1)).eval()
    x, y = images(1)[0]
    s, t = logits_of(algo, x)
    with torch.no_grad():
        got = float(algo(x, y, mode="loss")["distill.loss_dkd"])
    assert got == pytest.approx(float(DKDLoss(tau=1, beta=0.5, reduction="mean")(s, t, y)), rel=1e-5)
    assert got != pytest.approx(float(DKDLoss(tau=1, beta=0.5, reduction="mean")(s, t, (y + 1) % 10)), rel=1e-3)


def test_fitnets_config_with_real_widths_trains_its_connectors():
    cfg = load_config(CLS / "fitnets" / "fitnets_backbone_logits_resnet50_resnet18_8xb32_in1k.py")
    algo = build(cfg.model, architecture=resnet(18), teacher=resnet(50, seed=1))  # ResNet-18 -> ResNet-50 widths
    connector = algo.distiller.connectors["loss_s4_sfeat"]
    before = connector.conv_module[0].weight.detach().clone()
    trains(algo, images(batch=2), {"student.loss", "distill.loss_s4", "distill.loss_s3", "distill.loss_kl"})
    assert isinstance(connector.conv_module[1], torch.nn.BatchNorm2d)  # norm_cfg=dict(type='BN') was read, not built
    assert not torch.equal(before, connector.conv_module[0].weight)


def test_ofd_config_sets_margins_from_the_teachers_batch_norms():
    cfg = load_config(CLS / "ofd" / "ofd_backbone_resnet50_resnet18_8xb16_cifar10.py")
    algo = build(cfg.model, architecture=wrn(16, 2), teacher=wrn(28, 4, seed=1))
    assert isinstance(algo, OverhaulFeatureDistillation)
    margin = algo.distiller.connectors["loss_3_tfeat"]
    assert isinstance(margin, OFDTeacherConnector) and margin.margin.shape == (1, 256, 1, 1)
    assert bool((margin.margin < 0).all())  # E[x | x < 0] of each channel
    trains(algo, images(size=16), {"student.loss", "distill.loss_1", "distill.loss_2", "distill.loss_3"})


def test_zskt_config_trains_student_and_generator_without_data():
    cfg = load_config(CLS / "zskt" / "zskt_backbone_logits_resnet34_resnet18_8xb16_cifar10.py")
    algo = build(cfg.model, architecture=resnet(18, base=8, cifar=True),
                 teacher=resnet(34, base=8, cifar=True, seed=1), student_iter=2)
    assert list(algo.teachers) == ["res34"]  # teacher= filled the config's single teacher
    optimizers = separate_optimizers(algo, cfg.optim_wrapper)
    assert type(optimizers["architecture"]).__name__ == "SGD" and type(optimizers["generator"]).__name__ == "Adam"
    student = [p.detach().clone() for p in algo.student.parameters()]
    generator = [p.detach().clone() for p in algo.generator.parameters()]
    logs = algo.train_step(4, optimizers)
    assert set(logs) == {"generator.loss_kl", "distill.loss_kl", *(f"distill.loss_s{i}" for i in range(1, 5))}
    assert logs["generator.loss_kl"] < 0  # the generator maximises the student-teacher divergence (weight -2)
    assert any(not torch.equal(a, b) for a, b in zip(student, algo.student.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(generator, algo.generator.parameters(), strict=True))
    assert all(not p.requires_grad for p in algo.teachers.parameters())
    losses = algo(torch.zeros(3, 3, 32, 32), mode="loss")  # mode="loss": the student's losses on generated images
    assert set(losses) == {"distill.loss_kl", *(f"distill.loss_s{i}" for i in range(1, 5))}


def test_cwd_segmentation_config_distils_dense_logits():
    cfg = load_config(CONFIGS / "distill" / "mmseg" / "cwd" /
                      "cwd_logits_pspnet_r101-d8_pspnet_r18-d8_4xb2-80k_cityscapes-512x1024.py")
    algo = build(cfg.model, architecture=TinySegmentor(16), teacher=TinySegmentor(32, seed=1))
    g = torch.Generator().manual_seed(0)
    data = [(torch.rand(2, 3, 32, 32, generator=g), torch.randint(19, (2, 32, 32), generator=g)) for _ in range(2)]
    trains(algo, data, {"student.loss", "distill.loss_cwd"})  # per-pixel cross-entropy on [N, C, H, W] logits


@pytest.mark.parametrize("name", ["cwd_fpn_frcnn_r101_frcnn_r50_1x_coco.py",
                                  "cwd_fpn_retina_r101_retina_r50_1x_coco.py",
                                  "cwd_cls_head_gfl_r101_fpn_gfl_r50_fpn_1x_coco.py"])
def test_cwd_detection_configs_distil_fpn_levels(name):
    cfg = load_config(CONFIGS / "distill" / "mmdet" / "cwd" / name)
    teacher = TinyDetector(34, out_channels=16, seed=1)
    algo = build(cfg.model, architecture=TinyDetector(18, out_channels=16), teacher=teacher)
    assert isinstance(algo, FpnTeacherDistill)
    heads = []
    teacher.bbox_head.register_forward_hook(lambda *a: heads.append(1))
    trains(algo, images(size=64), {"student.loss_cls", *(f"distill.loss_cwd_fpn{i}" for i in range(5))})
    assert heads == []  # the teacher ran up to its neck only (extract_feat)


def test_a_config_model_that_is_not_substituted_says_what_to_pass():
    cfg = load_config(CLS / "kd" / "kd_logits_resnet34_resnet18_8xb32_in1k.py")
    with pytest.raises(Exception, match=r"architecture=dict\(cfg_path='mmcls::resnet/resnet18_8xb32_in1k.py'\).*"
                                        r"build\(cfg, architecture=your_model\)"):
        build(cfg.model, teacher=resnet(34, base=16))
