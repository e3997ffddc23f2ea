"""Relational KD (Park et al. 2019): distances and angles between the pooled features of a batch."""

_base_ = ['mmcls::_base_/datasets/imagenet_bs32.py', 'mmrazor::_base_/resnet18_from_resnet34.py']

pooled = dict(pooled=dict(type='ModuleOutputs', source='neck.gap'))
pair = dict(preds_S=dict(from_student=True, recorder='pooled'), preds_T=dict(from_student=False, recorder='pooled'))

model = dict(
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders=pooled,
        teacher_recorders=pooled,
        distill_losses=dict(
            loss_distance=dict(type='DistanceWiseRKD', with_l2_norm=True, loss_weight=20),
            loss_angle=dict(type='AngleWiseRKD', with_l2_norm=True, loss_weight=40)),
        loss_forward_mappings=dict(loss_distance=pair, loss_angle=pair)))
