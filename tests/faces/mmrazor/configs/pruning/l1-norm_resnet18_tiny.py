"""Iterative L1-norm pruning of the tiny CIFAR ResNet-18: the first conv of each block, per stage ratio.

Keys are MMRazor's unit names ('<first layer>_(0, C)_C'); a residual stream's unit is named after its first
producer (the stem conv for stage 1) and is left whole here.
"""

_base_ = ['mmcls::resnet/resnet18_8xb16_cifar10.py']

un_prune = 1.0
stage_ratio_1 = 0.5
stage_ratio_2 = 0.75
stage_ratio_3 = 0.75

target_pruning_ratio = {
    'backbone.conv1_(0, 8)_8': un_prune,  # the stage-1 residual stream
    'backbone.layer1.0.conv1_(0, 8)_8': stage_ratio_1,
    'backbone.layer1.1.conv1_(0, 8)_8': stage_ratio_1,
    'backbone.layer2.0.conv1_(0, 16)_16': stage_ratio_2,
    'backbone.layer2.1.conv1_(0, 16)_16': stage_ratio_2,
    'backbone.layer3.0.conv1_(0, 32)_32': stage_ratio_3,
    'backbone.layer3.1.conv1_(0, 32)_32': un_prune,
}

architecture = _base_.model

model = dict(
    _delete_=True,
    _scope_='mmrazor',
    type='ItePruneAlgorithm',
    architecture=architecture,
    mutator_cfg=dict(
        type='ChannelMutator',
        channel_unit_cfg=dict(type='L1MutableChannelUnit', default_args=dict(choice_mode='ratio')),
        parse_cfg=dict(type='ChannelAnalyzer', demo_input=(1, 3, 16, 16), tracer_type='FxTracer')),
    target_pruning_ratio=target_pruning_ratio,
    step_freq=2,
    prune_times=2,
)
