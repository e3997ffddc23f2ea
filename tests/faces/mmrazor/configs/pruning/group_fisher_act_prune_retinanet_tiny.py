"""Group Fisher pruning of a RetinaNet-shaped detector (MMDet's module names: ResNet-50 bottlenecks, FPN,
RetinaHead), normalised by activation memory.

The detector comes from a scoped mmdet base that slimkit skips: the test passes its own as ``architecture``.
The backbone's frozen stages are opened (``frozen_stages = -1``) so every stage can be pruned.
"""

_base_ = 'mmdet::retinanet/retinanet_r50_fpn_1x_coco.py'
checkpoint = 'https://weights.example.invalid/retinanet_r50_tiny.pth'

interval = 1                 # prune a channel after every step: the test trains a handful
normalization_type = 'act'
lr_ratio = 0.05
target_flop_ratio = 0.7
input_shape = (1, 3, 32, 32)

detector = _base_.model
detector.init_cfg = dict(type='Pretrained', checkpoint=checkpoint)
detector.backbone.frozen_stages = -1

model = dict(
    _scope_='mmrazor',
    type='GroupFisherAlgorithm',
    architecture=detector,
    interval=interval,
    mutator=dict(
        type='GroupFisherChannelMutator',
        parse_cfg=dict(type='ChannelAnalyzer', demo_input=input_shape, tracer_type='FxTracer'),
        channel_unit_cfg=dict(type='GroupFisherChannelUnit',
                              default_args=dict(normalization_type=normalization_type)),
    ),
)

model_wrapper_cfg = dict(type='mmrazor.GroupFisherDDP', broadcast_buffers=False)
optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.01 * lr_ratio, momentum=0.9, weight_decay=0.0001))
custom_hooks = [
    dict(type='mmrazor.PruningStructureHook'),
    dict(type='mmrazor.ResourceInfoHook', interval=interval,
         demo_input=dict(type='mmrazor.DefaultDemoInput', input_shape=input_shape),
         save_ckpt_thr=[target_flop_ratio]),
]
