"""DMCP supernet training of the tiny CIFAR ResNet-18 towards 1.5 MFLOPs (its full width is about 2.2 M MACs)."""

_base_ = ['mmcls::_base_/default_runtime.py']

supernet = dict(
    _scope_='mmcls',
    type='ImageClassifier',
    backbone=dict(type='ResNet_CIFAR', depth=18),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=64,
              loss=dict(type='mmcls.LabelSmoothLoss', mode='original', num_classes=10, label_smooth_val=0.1)))

model = dict(
    _scope_='mmrazor',
    type='DMCP',
    architecture=supernet,
    distiller=dict(
        type='ConfigurableDistiller',
        teacher_recorders=dict(fc=dict(type='ModuleOutputs', source='head.fc')),
        student_recorders=dict(fc=dict(type='ModuleOutputs', source='head.fc')),
        distill_losses=dict(loss_kl=dict(type='KLDivergence', tau=1, loss_weight=1)),
        loss_forward_mappings=dict(
            loss_kl=dict(
                preds_S=dict(recorder='fc', from_student=True),
                preds_T=dict(recorder='fc', from_student=False)))),
    mutator_cfg=dict(
        type='DMCPChannelMutator',
        channel_unit_cfg=dict(type='DMCPChannelUnit', default_args=dict(choice_mode='number')),
        parse_cfg=dict(type='ChannelAnalyzer', demo_input=(1, 3, 16, 16), tracer_type='BackwardTracer'),
        pruning_cfg=(0.25, 1, 0.25)),
    strategy=['max', 'min', 'scheduled_random', 'arch_random'],
    arch_start_train=1,
    arch_train_freq=1,
    flop_loss_weight=0.1,
    distillation_times=1,
    target_flops=1.5)

model_wrapper_cfg = dict(type='mmrazor.DMCPDDP', broadcast_buffers=False, find_unused_parameters=True)
