"""Group Fisher pruning of a tiny CIFAR-style ResNet-18 (MMCls module names), normalised by activation memory.

The knobs at the top are the ones MMRazor's prune template asks for; the model comes from a scoped base that
slimkit skips (the test passes its own network as ``architecture``).
"""

_base_ = 'mmcls::resnet/resnet18_8xb16_cifar10.py'
pretrained_path = 'https://example.invalid/resnet18_cifar.pth'

interval = 2                 # steps between two pruned channels
normalization_type = 'act'   # 'flops' | 'act' | 'none'
lr_ratio = 0.1
target_flop_ratio = 0.5
input_shape = (1, 3, 16, 16)

architecture = _base_.model
if hasattr(_base_, 'data_preprocessor'):
    architecture.update({'data_preprocessor': _base_.data_preprocessor})
    data_preprocessor = {}
architecture.init_cfg = dict(type='Pretrained', checkpoint=pretrained_path)

model = dict(
    _delete_=True,
    _scope_='mmrazor',
    type='GroupFisherAlgorithm',
    architecture=architecture,
    interval=interval,
    mutator=dict(
        type='GroupFisherChannelMutator',
        parse_cfg=dict(type='ChannelAnalyzer', demo_input=input_shape, tracer_type='FxTracer'),
        channel_unit_cfg=dict(
            type='GroupFisherChannelUnit',
            default_args=dict(normalization_type=normalization_type),
        ),
    ),
)

model_wrapper_cfg = dict(type='mmrazor.GroupFisherDDP', broadcast_buffers=False)
optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1 * lr_ratio, momentum=0.9))
custom_hooks = getattr(_base_, 'custom_hooks', []) + [
    dict(type='mmrazor.PruningStructureHook'),
    dict(type='mmrazor.ResourceInfoHook', interval=interval,
         demo_input=dict(type='mmrazor.DefaultDemoInput', input_shape=input_shape),
         save_ckpt_thr=[target_flop_ratio]),
]
