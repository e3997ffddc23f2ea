"""DCFF on a PointRend-shaped segmentor (MMSeg's CascadeEncoderDecoder: ResNet, FPN, FPNHead, PointHead):
the backbone's stages pruned by depth, layer4 the least; the heads are left whole."""

_base_ = [
    'mmseg::_base_/datasets/cityscapes.py',
    'mmseg::_base_/schedules/schedule_80k.py',
    'mmseg::_base_/default_runtime.py',
]

segmentor = dict(
    _scope_='mmseg',
    type='CascadeEncoderDecoder',
    num_stages=2,
    backbone=dict(type='ResNetV1c', depth=50, out_indices=(0, 1, 2, 3)),
    neck=dict(type='FPN', in_channels=[32, 64, 128, 256], out_channels=16, num_outs=4),
    decode_head=[
        dict(type='FPNHead', in_channels=[16] * 4, channels=16, num_classes=10),
        dict(type='PointHead', in_channels=[16], channels=16, num_fcs=2, num_classes=10,
             coarse_pred_each_layer=True),
    ])

ratios = {1: 0.5, 2: 0.5, 3: 0.625, 4: 0.75}  # kept share of conv1 / conv2 per stage
blocks = {1: 3, 2: 4, 3: 6, 4: 3}
target_pruning_ratio = {
    f'backbone.layer{s}.{b}.{conv}_(0, {8 * 2 ** (s - 1)})_{8 * 2 ** (s - 1)}': ratios[s]
    for s in ratios for b in range(blocks[s]) for conv in ('conv1', 'conv2')
}

optim_wrapper = dict(type='OptimWrapper', optimizer=dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=0.0005),
                     clip_grad=dict(max_norm=25, norm_type=2))

model = dict(
    _scope_='mmrazor',
    type='DCFF',
    architecture=segmentor,
    mutator_cfg=dict(
        type='DCFFChannelMutator',
        channel_unit_cfg=dict(type='DCFFChannelUnit', default_args=dict(choice_mode='ratio')),
        parse_cfg=dict(type='ChannelAnalyzer', demo_input=(1, 3, 32, 32), tracer_type='BackwardTracer')),
    target_pruning_ratio=target_pruning_ratio,
    step_freq=2,
    linear_schedule=False)
