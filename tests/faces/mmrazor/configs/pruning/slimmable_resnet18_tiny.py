"""A slimmable tiny CIFAR ResNet-18: three widths of the stage-1/2 blocks, units listed in a JSON file."""

_base_ = ['mmcls::_base_/default_runtime.py']

supernet = dict(
    _scope_='mmcls',
    type='ImageClassifier',
    backbone=dict(type='ResNet_CIFAR', depth=18),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=64))

model = dict(
    _delete_=True,
    _scope_='mmrazor',
    type='SlimmableNetwork',
    architecture=supernet,
    mutator=dict(
        type='SlimmableChannelMutator',
        channel_unit_cfg=dict(type='SlimmableChannelUnit', units='{{fileDirname}}/resnet18_tiny_slimmable_units.json'),
        parse_cfg=dict(type='ChannelAnalyzer', demo_input=(1, 3, 16, 16), tracer_type='BackwardTracer')))

model_wrapper_cfg = dict(type='mmrazor.SlimmableNetworkDDP', broadcast_buffers=False, find_unused_parameters=True)
val_cfg = dict(type='mmrazor.SlimmableValLoop')
