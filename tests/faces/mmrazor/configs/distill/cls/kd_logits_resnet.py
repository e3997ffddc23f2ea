"""Logit distillation (Hinton et al.): ResNet-18 learns the softened class scores of a ResNet-34.

The two ``mmcls::`` bases belong to another MMEngine-based package: slimkit skips them (your batches and models
replace them); the ``mmrazor::`` base (the model pair) is read from this repository's ``configs/_base_``.
"""

_base_ = [
    'mmcls::_base_/datasets/imagenet_bs32.py',
    'mmcls::_base_/default_runtime.py',
    'mmrazor::_base_/resnet18_from_resnet34.py',
]

# A remote pickle checkpoint: logged and not read when you pass teacher= yourself.
teacher_ckpt = 'https://models.example.com/classifiers/resnet34_small_teacher.pth'

model = dict(
    teacher_ckpt=teacher_ckpt,
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders=dict(logits=dict(type='ModuleOutputs', source='head.fc')),
        teacher_recorders=dict(logits=dict(type='ModuleOutputs', source='head.fc')),
        distill_losses=dict(loss_soft=dict(type='KLDivergence', tau=2, loss_weight=1.5)),
        loss_forward_mappings=dict(
            loss_soft=dict(
                preds_S=dict(from_student=True, recorder='logits'),
                preds_T=dict(from_student=False, recorder='logits')))))

val_cfg = dict(_delete_=True, type='mmrazor.SingleTeacherDistillValLoop')
