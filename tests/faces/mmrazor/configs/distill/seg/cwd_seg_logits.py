"""Channel-wise distillation of a segmentor's dense class scores (``decode_head.conv_seg``, [N, C, H, W])."""

_base_ = [
    'mmseg::_base_/datasets/cityscapes.py',
    'mmseg::_base_/schedules/schedule_80k.py',
    'mmseg::_base_/default_runtime.py',
]

scores = dict(type='ModuleOutputs', source='decode_head.conv_seg')

model = dict(
    _scope_='mmrazor',
    type='SingleTeacherDistill',
    architecture=dict(cfg_path='mmseg::pspnet/pspnet_r18-d8_4xb2-80k_cityscapes-512x1024.py', pretrained=False),
    teacher=dict(cfg_path='mmseg::pspnet/pspnet_r101-d8_4xb2-80k_cityscapes-512x1024.py', pretrained=False),
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders=dict(scores=scores),
        teacher_recorders=dict(scores=scores),
        distill_losses=dict(loss_cwd=dict(type='ChannelWiseDivergence', tau=2, loss_weight=3)),
        loss_forward_mappings=dict(
            loss_cwd=dict(
                preds_S=dict(from_student=True, recorder='scores'),
                preds_T=dict(from_student=False, recorder='scores')))))
