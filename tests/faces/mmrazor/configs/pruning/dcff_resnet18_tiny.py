"""DCFF on the tiny CIFAR ResNet-18: fixed widths per block, the kept filters fused from all filters."""

_base_ = [
    'mmcls::_base_/datasets/cifar10_bs16.py',
    'mmcls::_base_/schedules/cifar10_bs128.py',
    'mmcls::_base_/default_runtime.py',
]

stage_ratio_1 = 0.5
stage_ratio_2 = 0.75

target_pruning_ratio = {
    'backbone.layer1.0.conv1_(0, 8)_8': stage_ratio_1,
    'backbone.layer1.1.conv1_(0, 8)_8': stage_ratio_1,
    'backbone.layer2.0.conv1_(0, 16)_16': stage_ratio_2,
    'backbone.layer2.0.conv2_(0, 16)_16': stage_ratio_2,  # a residual stream: all its convs fuse alike
    'backbone.layer2.1.conv1_(0, 16)_16': stage_ratio_2,
}

optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=0.0001))
train_cfg = dict(by_epoch=True, max_epochs=120, val_interval=1)

model = dict(
    _scope_='mmrazor',
    type='DCFF',
    architecture=dict(cfg_path='mmcls::resnet/resnet18_8xb16_cifar10.py', pretrained=False),
    mutator_cfg=dict(
        type='DCFFChannelMutator',
        channel_unit_cfg=dict(type='DCFFChannelUnit', default_args=dict(choice_mode='ratio')),
        parse_cfg=dict(type='ChannelAnalyzer', demo_input=(1, 3, 16, 16), tracer_type='BackwardTracer')),
    data_preprocessor=None,
    target_pruning_ratio=target_pruning_ratio,
    step_freq=1,
    linear_schedule=False)

val_cfg = dict(_delete_=True, type='mmrazor.ItePruneValLoop')
