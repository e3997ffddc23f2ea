"""The FPN channel-wise config for one-stage detectors: only the model files and the optimizer change."""

_base_ = './cwd_fpn_levels.py'

model = dict(
    architecture=dict(cfg_path='mmdet::retinanet/retinanet_r50_fpn_1x_coco.py'),
    teacher=dict(cfg_path='mmdet::retinanet/retinanet_r101_fpn_2x_coco.py', pretrained=True))

optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.02, momentum=0.9, weight_decay=1e-4))
