"""Overhaul of feature distillation (Heo et al. 2019) between wide ResNets (WRN-10-1 <- WRN-10-2).

Features are taken before each stage's first ReLU (the pre-activation ``bn1`` outputs); the teacher's side
goes through a margin ReLU whose per-channel margins the algorithm sets from the teacher's batch norms. The
``mmrazor::`` model paths name MMRazor's own wide ResNet configs; pass your models with architecture= and
teacher= (slimkit does not build them).
"""

_base_ = ['mmcls::_base_/datasets/cifar10_bs16.py', 'mmrazor::_base_/preprocessors.py']

# (recorded module, student channels, teacher channels, loss weight) per distillation point
points = [('backbone.layer2.0.bn1', 16, 32, 0.25),
          ('backbone.layer3.0.bn1', 32, 64, 0.5),
          ('backbone.bn1', 64, 128, 1.0)]

model = dict(
    _scope_='mmrazor',
    type='OverhaulFeatureDistillation',
    data_preprocessor=_base_.plain_norm,
    architecture=dict(cfg_path='mmrazor::vanilla/mmcls/wide-resnet/wrn10-w1_cifar.py', pretrained=False),
    teacher=dict(cfg_path='mmrazor::vanilla/mmcls/wide-resnet/wrn10-w2_cifar.py', pretrained=False),
    calculate_student_loss=True,
    student_trainable=True,
    distiller=dict(
        type='OFDDistiller',
        student_recorders={f'pre{i}': dict(type='ModuleOutputs', source=p[0]) for i, p in enumerate(points)},
        teacher_recorders={f'pre{i}': dict(type='ModuleOutputs', source=p[0]) for i, p in enumerate(points)},
        distill_losses={f'loss_ofd{i}': dict(type='OFDLoss', loss_weight=p[3]) for i, p in enumerate(points)},
        connectors={
            **{f'widen{i}': dict(type='ConvModuleConnector', in_channel=p[1], out_channel=p[2],
                                 norm_cfg=dict(type='BN'), act_cfg=None) for i, p in enumerate(points)},
            **{f'margin{i}': dict(type='OFDTeacherConnector') for i in range(len(points))}},
        loss_forward_mappings={
            f'loss_ofd{i}': dict(
                s_feature=dict(from_student=True, recorder=f'pre{i}', connector=f'widen{i}'),
                t_feature=dict(from_student=False, recorder=f'pre{i}', connector=f'margin{i}'))
            for i in range(len(points))}))
