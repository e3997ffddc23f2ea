"""FBKD (Zhang & Ma 2021): non-local attention connectors on both sides of four FPN convs.

A plain ``SingleTeacherDistill`` around detectors (the teacher runs its full forward). The large, early levels
are sub-sampled harder (``maxpool_stride``) and reduced more before their attention maps are computed.
"""

_base_ = [
    'mmdet::_base_/datasets/coco_detection.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]

width = 32  # the FPN's output channels
# per level: the connector arguments beyond the defaults
level_args = [dict(reduction=4, maxpool_stride=8), dict(reduction=4, maxpool_stride=4), dict(), dict()]

model = dict(
    _scope_='mmrazor',
    type='SingleTeacherDistill',
    architecture=dict(cfg_path='mmdet::faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py', pretrained=True),
    teacher=dict(cfg_path='mmdet::faster_rcnn/faster-rcnn_r101_fpn_1x_coco.py', pretrained=False),
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders={f'p{i}': dict(type='ModuleOutputs', source=f'neck.fpn_convs.{i}.conv') for i in range(4)},
        teacher_recorders={f'p{i}': dict(type='ModuleOutputs', source=f'neck.fpn_convs.{i}.conv') for i in range(4)},
        connectors={
            **{f'nonlocal_s{i}': dict(type='FBKDStudentConnector', in_channels=width, mode='dot_product',
                                      sub_sample=True, **args) for i, args in enumerate(level_args)},
            **{f'nonlocal_t{i}': dict(type='FBKDTeacherConnector', in_channels=width, mode='dot_product',
                                      sub_sample=True, **args) for i, args in enumerate(level_args)}},
        distill_losses={f'loss_fbkd_p{i}': dict(type='FBKDLoss') for i in range(4)},
        loss_forward_mappings={
            f'loss_fbkd_p{i}': dict(s_input=dict(from_student=True, recorder=f'p{i}', connector=f'nonlocal_s{i}'),
                                    t_input=dict(from_student=False, recorder=f'p{i}', connector=f'nonlocal_t{i}'))
            for i in range(4)}))
