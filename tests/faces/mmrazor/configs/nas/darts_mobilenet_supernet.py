"""DARTS on the tiny MobileNetV2 space: each later block mixes its candidates by softmax(alpha); bi-level update."""

_base_ = [
    'mmrazor::_base_/nas/search_settings.py',
    'mmrazor::_base_/nas/mobilenet_tiny_space.py',
]

diff_block = dict(_base_.later_block, type='DiffMutableOP')  # the same candidates, mixed
nas_backbone = dict(
    _base_.nas_backbone,
    arch_setting=[[16, 1, 1, _base_.first_block], [24, 2, 2, diff_block], [32, 2, 2, diff_block]])

supernet = dict(
    _scope_='mmcls',
    type='ImageClassifier',
    backbone=nas_backbone,
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=96, topk=(1, 5)))

model = dict(type='mmrazor.Darts', architecture=supernet, mutator=dict(type='mmrazor.NasMutator'), unroll=True)

optim_wrapper = dict(
    constructor='mmrazor.SeparateOptimWrapperConstructor',
    architecture=dict(optimizer=dict(type='SGD', lr=0.025, momentum=0.9, weight_decay=3e-4)),
    mutator=dict(optimizer=dict(type='Adam', lr=3e-4, weight_decay=1e-3)))
