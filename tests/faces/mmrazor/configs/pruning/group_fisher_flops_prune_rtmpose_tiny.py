"""Group Fisher pruning of an RTMPose-shaped pose model (MMDet's CSPNeXt backbone, an RTMCC-like head),
normalised by FLOPs. No ``demo_input``: the model is traced at its head's ``decoder.input_size``, as MMRazor's pose
demo input does. The Linear layers of the head are not pruned (``mutate_linear`` stays False).
"""

_base_ = 'mmpose::body_2d_keypoint/rtmpose/coco/rtmpose-t_8xb256-420e_coco-256x192.py'

interval = 1
normalization_type = 'flops'
lr_ratio = 0.2
target_flop_ratio = 0.8

pose_model = _base_.model
pose_model['_scope_'] = 'mmpose'

model = dict(
    _delete_=True,
    _scope_='mmrazor',
    type='GroupFisherAlgorithm',
    architecture=pose_model,
    interval=interval,
    mutator=dict(
        type='GroupFisherChannelMutator',
        parse_cfg=dict(type='ChannelAnalyzer', tracer_type='FxTracer'),
        channel_unit_cfg=dict(type='GroupFisherChannelUnit',
                              default_args=dict(normalization_type=normalization_type)),
    ),
)

optim_wrapper = dict(optimizer=dict(type='AdamW', lr=4e-3 * lr_ratio, weight_decay=0.05))
custom_hooks = [
    dict(type='mmrazor.PruningStructureHook'),
    dict(type='mmrazor.ResourceInfoHook', interval=interval,
         demo_input=dict(type='mmrazor.DefaultDemoInput', input_shape=(1, 3, 64, 64)),
         save_ckpt_thr=[target_flop_ratio]),
]
