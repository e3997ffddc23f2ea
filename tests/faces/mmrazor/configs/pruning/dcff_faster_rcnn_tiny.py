"""DCFF on a Faster R-CNN-shaped detector: fixed kept ratios per bottleneck conv (the residual streams by
their ``conv3``), each kept filter fused from all the layer's filters; the neck and heads are left whole."""

_base_ = [
    'mmdet::_base_/models/faster-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_detection.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]

inner_ratio = 0.5    # conv1 / conv2 of every bottleneck
stream_ratio = 0.75  # the residual streams

widths = {1: 8, 2: 16, 3: 32, 4: 64}  # bottleneck width per stage (x4 on the residual stream)
blocks = {1: 3, 2: 4, 3: 6, 4: 3}
target_pruning_ratio = {
    f'backbone.layer{s}.{b}.{conv}_(0, {widths[s]})_{widths[s]}': inner_ratio
    for s in widths for b in range(blocks[s]) for conv in ('conv1', 'conv2')
}
target_pruning_ratio.update({
    f'backbone.layer{s}.0.conv3_(0, {4 * widths[s]})_{4 * widths[s]}': stream_ratio for s in widths
})

optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.02, momentum=0.9, weight_decay=0.0001))
train_cfg = dict(max_epochs=24, val_interval=1)

model = dict(
    _scope_='mmrazor',
    type='DCFF',
    architecture=_base_.model,
    mutator_cfg=dict(
        type='DCFFChannelMutator',
        channel_unit_cfg=dict(type='DCFFChannelUnit', default_args=dict(choice_mode='ratio')),
        parse_cfg=dict(type='ChannelAnalyzer', demo_input=(1, 3, 32, 32), tracer_type='FxTracer')),
    target_pruning_ratio=target_pruning_ratio,
    step_freq=1,
    linear_schedule=False)

val_cfg = dict(_delete_=True, type='mmrazor.ItePruneValLoop')
