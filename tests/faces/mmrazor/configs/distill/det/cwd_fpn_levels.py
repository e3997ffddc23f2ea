"""Channel-wise distillation (Shu et al. 2021) of every FPN level of a detector.

``FpnTeacherDistill`` runs the teacher only up to its neck. One recorder holds the neck's whole output (a
tuple of five levels); ``data_idx`` picks a level for each loss. The mappings are written once, for all levels.
"""

_base_ = [
    'mmdet::_base_/datasets/coco_detection.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]

num_levels = 5

model = dict(
    _scope_='mmrazor',
    type='FpnTeacherDistill',
    architecture=dict(cfg_path='mmdet::faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py', pretrained=False),
    teacher=dict(cfg_path='mmdet::faster_rcnn/faster-rcnn_r101_fpn_2x_coco.py', pretrained=False),
    teacher_ckpt='two_stage_r101_teacher.pth',
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders=dict(fpn=dict(type='ModuleOutputs', source='neck')),
        teacher_recorders=dict(fpn=dict(type='ModuleOutputs', source='neck')),
        distill_losses={f'loss_cwd_p{i}': dict(type='ChannelWiseDivergence', tau=2, loss_weight=4)
                        for i in range(num_levels)},
        loss_forward_mappings={
            f'loss_cwd_p{i}': dict(preds_S=dict(from_student=True, recorder='fpn', data_idx=i),
                                   preds_T=dict(from_student=False, recorder='fpn', data_idx=i))
            for i in range(num_levels)}))

val_cfg = dict(_delete_=True, type='mmrazor.SingleTeacherDistillValLoop')
