"""Detection and segmentation distillation configs (FPN levels, dense logits) around small MMDet/MMSeg-shaped
models: channel-wise (CWD), PKD, FBKD and MGD on the FPN, CWD on a segmentor's class scores."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from slimkit.errors import ConfigError
from slimkit.razor import FpnTeacherDistill, SingleTeacherDistill, SkippedBase, build, load_config, skipped_bases
from slimkit.training.distill import FBKDStudentConnector, MGDConnector
from tests.faces.mmrazor.mm_models import TinyDetector, TinySegmentor, images, trains

DET = Path(__file__).parent / "configs" / "distill" / "det"
SEG = Path(__file__).parent / "configs" / "distill" / "seg"
MMDET_BASES = ["mmdet::_base_/datasets/coco_detection.py", "mmdet::_base_/schedules/schedule_1x.py",
               "mmdet::_base_/default_runtime.py"]


def detectors() -> dict[str, TinyDetector]:
    return {"architecture": TinyDetector(18), "teacher": TinyDetector(34, seed=1)}


@pytest.mark.parametrize("name,student_cfg", [
    ("cwd_fpn_levels.py", "mmdet::faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py"),
    ("cwd_fpn_one_stage.py", "mmdet::retinanet/retinanet_r50_fpn_1x_coco.py"),
    ("cwd_fpn_dense_head.py", "mmdet::gfl/gfl_r50_fpn_1x_coco.py"),
])
def test_cwd_fpn_configs_and_their_children_distil_every_level(name, student_cfg):
    cfg = load_config(DET / name)
    assert skipped_bases(cfg) == MMDET_BASES  # inherited through one or two relative bases
    assert cfg.model.architecture.cfg_path == student_cfg and cfg.model.architecture.pretrained is False
    assert len(cfg.model.distiller.distill_losses) == 5
    teacher = TinyDetector(34, seed=1)
    algo = build(cfg.model, architecture=TinyDetector(18), teacher=teacher)
    assert isinstance(algo, FpnTeacherDistill)
    heads = []
    teacher.bbox_head.register_forward_hook(lambda *a: heads.append(1))
    trains(algo, images(size=64, batch=2), {"student.loss_cls", *(f"distill.loss_cwd_p{i}" for i in range(5))})
    assert heads == []  # the teacher ran up to its neck only (extract_feat)


def test_cwd_child_configs_override_what_they_name_only():
    levels, one_stage, dense = (load_config(DET / n) for n in
                                ("cwd_fpn_levels.py", "cwd_fpn_one_stage.py", "cwd_fpn_dense_head.py"))
    assert levels.model.teacher.pretrained is False and one_stage.model.teacher.pretrained is True
    assert dense.model.teacher.pretrained is True  # from the middle config
    assert levels.model.teacher_ckpt == one_stage.model.teacher_ckpt == "two_stage_r101_teacher.pth"
    assert dense.model.teacher_ckpt.startswith("https://")
    assert dense.optim_wrapper == one_stage.optim_wrapper == {
        "optimizer": {"type": "SGD", "lr": 0.02, "momentum": 0.9, "weight_decay": 1e-4}}
    assert "optim_wrapper" not in levels
    assert dense.model.distiller == levels.model.distiller


def test_pkd_child_config_reweights_the_inherited_losses():
    base, heavier = load_config(DET / "pkd_fpn_levels.py"), load_config(DET / "pkd_fpn_heavier.py")
    assert heavier.model.distiller.distill_losses.loss_pkd_p2 == {"type": "PKDLoss", "loss_weight": 12}
    assert heavier.model.teacher.cfg_path.endswith("retinanet_x101-64x4d_fpn_1x_coco.py")
    batch = images(1, size=64, batch=2)[0]
    values = []
    for cfg in (base, heavier):
        algo = build(cfg.model, **detectors()).eval()
        with torch.no_grad():
            values.append(algo(*batch, mode="loss"))
    for i in range(4):  # same models, same batch: the value scales with the weight, 3 -> 12
        key = f"distill.loss_pkd_p{i}"
        assert float(values[1][key]) == pytest.approx(4 * float(values[0][key]), rel=1e-5)
    algo = build(heavier.model, **detectors())
    trains(algo, images(size=64, batch=2), {"student.loss_cls", *(f"distill.loss_pkd_p{i}" for i in range(4))})


def test_fbkd_config_trains_both_sides_non_local_connectors():
    cfg = load_config(DET / "fbkd_fpn_nonlocal.py")
    assert cfg.model.distiller.connectors.nonlocal_s0.maxpool_stride == 8
    assert "maxpool_stride" not in cfg.model.distiller.connectors.nonlocal_t3
    algo = build(cfg.model, **detectors())
    assert type(algo) is SingleTeacherDistill
    student_side = algo.distiller.connectors["nonlocal_s1"]
    assert isinstance(student_side, FBKDStudentConnector)
    teacher_side = algo.distiller.connectors["nonlocal_t1"]
    feature = torch.rand(2, 32, 16, 16)
    # masks, descriptors, the non-local relation and the feature: the student's last two adapted to the teacher's
    assert [tuple(o.shape) for o in student_side(feature)] == [(2, 1, 16, 16), (2, 32, 1, 1), (2, 32), (2, 1, 16, 16),
                                                               (2, 32, 16, 16), (2, 32, 16, 16)]
    assert [tuple(o.shape) for o in teacher_side(feature)] == [(2, 1, 16, 16), (2, 32, 1, 1), (2, 1, 16, 16),
                                                               (2, 32, 16, 16), (2, 32, 16, 16)]
    before = [p.detach().clone() for p in teacher_side.parameters()]
    trains(algo, images(size=64, batch=2), {"student.loss_cls", *(f"distill.loss_fbkd_p{i}" for i in range(4))})
    assert any(not torch.equal(a, b) for a, b in zip(before, teacher_side.parameters(), strict=True))


def test_mgd_config_takes_its_student_from_a_skipped_base():
    cfg = load_config(DET / "mgd_fpn_masked.py")  # _base_ is one string, of another package: skipped
    assert skipped_bases(cfg) == ["mmdet::retinanet/retinanet_r50_fpn_2x_coco.py"]
    assert isinstance(cfg.model.architecture, SkippedBase) and cfg.model.architecture.path == "model"
    assert set(cfg.model) == {"_scope_", "type", "architecture", "teacher", "distiller"}  # _delete_: no merge
    with pytest.raises(ConfigError, match=r"retinanet_r50_fpn_2x_coco\.py.*architecture="):
        build(cfg.model, teacher=TinyDetector(34, seed=1))
    algo = build(cfg.model, **detectors())
    generate = algo.distiller.connectors["generate3"]
    assert isinstance(generate, MGDConnector)
    assert generate(torch.rand(2, 32, 4, 4)).shape == (2, 32, 4, 4)  # regenerates the teacher's feature shape
    trains(algo, images(size=64, batch=2), {"student.loss_cls", *(f"distill.loss_mgd_p{i}" for i in range(5))})


def test_cwd_segmentation_config_distils_dense_class_scores():
    cfg = load_config(SEG / "cwd_seg_logits.py")
    assert [b.split("/")[-1] for b in skipped_bases(cfg)] == ["cityscapes.py", "schedule_80k.py",
                                                               "default_runtime.py"]
    algo = build(cfg.model, architecture=TinySegmentor(16), teacher=TinySegmentor(32, seed=1))
    g = torch.Generator().manual_seed(0)
    # one class per 8x8 patch: the segmentor's own resolution (per-pixel noise could not be learned)
    y = torch.randint(19, (2, 4, 4), generator=g).repeat_interleave(8, 1).repeat_interleave(8, 2)
    data = [(torch.rand(2, 3, 32, 32, generator=g), y)]
    trains(algo, data, {"student.loss", "distill.loss_cwd"}, lr=1e-2)  # per-pixel cross-entropy on [N, C, H, W]
