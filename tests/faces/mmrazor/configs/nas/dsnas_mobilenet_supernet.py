"""DSNAS on the tiny MobileNetV2 space: one drawn candidate per block and step, alpha learned in the same run.

Two epochs of uniform paths first (supernet pre-training), then the search; from epoch 4 on the argmax
architecture is fixed and fine-tuned.
"""

_base_ = [
    'mmrazor::_base_/nas/search_settings.py',
    'mmrazor::_base_/nas/mobilenet_tiny_space.py',
]

onehot_block = dict(_base_.later_block, type='OneHotMutableOP')
nas_backbone = dict(
    _base_.nas_backbone,
    arch_setting=[[16, 1, 1, _base_.first_block], [24, 2, 2, onehot_block], [32, 2, 2, onehot_block]])

supernet = dict(
    _scope_='mmcls',
    type='ImageClassifier',
    backbone=nas_backbone,
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=96, topk=(1, 5)))

model = dict(
    type='mmrazor.DSNAS',
    architecture=supernet,
    mutator=dict(type='mmrazor.NasMutator'),
    pretrain_epochs=2,
    finetune_epochs=4)

optim_wrapper = dict(
    constructor='mmrazor.SeparateOptimWrapperConstructor',
    architecture=dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=4e-5)),
    mutator=dict(optimizer=dict(type='Adam', lr=1e-3, betas=(0.5, 0.999), weight_decay=0)))
