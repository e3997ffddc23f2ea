"""SPOS supernet training on the tiny MobileNetV2 space (inverted residuals, or skipping a block)."""

_base_ = [
    'mmrazor::_base_/nas/search_settings.py',
    'mmrazor::_base_/nas/mobilenet_tiny_space.py',
]

supernet = dict(
    _scope_='mmcls',
    type='ImageClassifier',
    backbone=_base_.nas_backbone,
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=96, topk=(1, 5)))

model = dict(type='mmrazor.SPOS', architecture=supernet, mutator=dict(type='mmrazor.NasMutator'))
