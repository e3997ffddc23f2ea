"""DetNAS (Chen et al. 2019): SPOS supernet training of a searchable ShuffleNetV2 backbone inside a RetinaNet-shaped
detector. The backbone is built from ``nas_backbone`` with every stage an output; the detector around it (FPN,
RetinaHead) is yours (``build(cfg.model, architecture=your_detector)``).
"""

_base_ = [
    'mmdet::_base_/datasets/coco_detection.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmrazor::_base_/nas/shufflenet_tiny_space.py',
]

norm_cfg = dict(type='BN', requires_grad=True)

supernet = dict(
    _scope_='mmdet',
    type='RetinaNet',
    backbone=_base_.nas_backbone,
    neck=dict(type='FPN', in_channels=[16, 32, 64], out_channels=16, start_level=0, add_extra_convs='on_output',
              num_outs=4, norm_cfg=norm_cfg),
    bbox_head=dict(type='RetinaHead', num_classes=10, in_channels=16, stacked_convs=2, feat_channels=16))
supernet.backbone.out_indices = (0, 1, 2)  # every stage feeds the FPN
supernet.backbone.norm_cfg = norm_cfg

model = dict(_delete_=True, type='mmrazor.SPOS', architecture=supernet, mutator=dict(type='mmrazor.NasMutator'))

find_unused_parameters = True
