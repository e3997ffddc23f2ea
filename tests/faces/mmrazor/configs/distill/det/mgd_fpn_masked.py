"""MGD (Yang et al. 2022): the student's FPN features, randomly masked, must regenerate the teacher's.

The student is the model of the (skipped) MMDet base itself: ``_base_.model`` is a placeholder that names the
skipped file, so building this config without ``architecture=`` says which model to pass. ``_delete_=True``
makes ``model`` replace the base's model instead of merging into it.
"""

_base_ = 'mmdet::retinanet/retinanet_r50_fpn_2x_coco.py'

student = _base_.model
student.neck.init_cfg = dict(type='Pretrained', prefix='neck.', checkpoint='retina_x101_teacher.pth')

width = 32

model = dict(
    _scope_='mmrazor',
    _delete_=True,
    type='FpnTeacherDistill',
    architecture=student,
    teacher=dict(cfg_path='mmdet::retinanet/retinanet_x101-64x4d_fpn_1x_coco.py', pretrained=False),
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders={f'p{i}': dict(type='ModuleOutputs', source=f'neck.fpn_convs.{i}.conv') for i in range(5)},
        teacher_recorders={f'p{i}': dict(type='ModuleOutputs', source=f'neck.fpn_convs.{i}.conv') for i in range(5)},
        connectors={f'generate{i}': dict(type='MGDConnector', student_channels=width, teacher_channels=width,
                                         lambda_mgd=0.5) for i in range(5)},
        distill_losses={f'loss_mgd_p{i}': dict(type='MGDLoss', alpha_mgd=1e-3) for i in range(5)},
        loss_forward_mappings={
            f'loss_mgd_p{i}': dict(preds_S=dict(from_student=True, recorder=f'p{i}', connector=f'generate{i}'),
                                   preds_T=dict(from_student=False, recorder=f'p{i}'))
            for i in range(5)}))

optimizer_config = dict(_delete_=True, grad_clip=dict(max_norm=20, norm_type=2))
param_scheduler = [dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=200),
                   dict(type='MultiStepLR', by_epoch=True, begin=0, end=24, milestones=[16, 22], gamma=0.1)]
