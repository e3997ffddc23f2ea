"""PKD (Cao et al. 2022): Pearson correlation between normalised student and teacher FPN features, 4 levels."""

_base_ = [
    'mmdet::_base_/datasets/coco_detection.py',
    'mmdet::_base_/schedules/schedule_2x.py',
    'mmdet::_base_/default_runtime.py',
]

levels = [0, 1, 2, 3]
level_loss = dict(type='PKDLoss', loss_weight=3)

model = dict(
    _scope_='mmrazor',
    type='FpnTeacherDistill',
    architecture=dict(cfg_path='mmdet::faster_rcnn/faster-rcnn_r50_fpn_2x_coco.py'),
    teacher=dict(cfg_path='mmdet::faster_rcnn/faster-rcnn_r101_fpn_2x_coco.py'),
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders=dict(fpn=dict(type='ModuleOutputs', source='neck')),
        teacher_recorders=dict(fpn=dict(type='ModuleOutputs', source='neck')),
        distill_losses={f'loss_pkd_p{i}': level_loss for i in levels},
        loss_forward_mappings={
            f'loss_pkd_p{i}': dict(preds_S=dict(from_student=True, recorder='fpn', data_idx=i),
                                   preds_T=dict(from_student=False, recorder='fpn', data_idx=i))
            for i in levels}))
