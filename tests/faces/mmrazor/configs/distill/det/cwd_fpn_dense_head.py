"""Two levels of inheritance: the one-stage config with yet another pair of detectors and a teacher file."""

_base_ = ['./cwd_fpn_one_stage.py']

model = dict(
    architecture=dict(cfg_path='mmdet::gfl/gfl_r50_fpn_1x_coco.py'),
    teacher=dict(cfg_path='mmdet::gfl/gfl_r101_fpn_ms-2x_coco.py'),
    teacher_ckpt='https://models.example.com/detectors/gfl_r101.pth')
