"""Factor transfer (Kim et al. 2018), stage 1: the teacher's paraphraser learns to reconstruct its features.

Only the paraphraser trains (the student is frozen and computes no task loss): the loss compares the teacher's
stage-4 features with their reconstruction through the paraphraser (``phase='pretrain'``).
Stage 2 is ``ft_translator_train.py``. Widths are those of ResNet-18 / ResNet-50 at base 16.
"""

_base_ = ['mmcls::_base_/datasets/cifar10_bs16.py', 'mmrazor::_base_/resnet18_from_resnet34.py']

factor_channels = 32

model = dict(
    architecture=dict(cfg_path='mmcls::resnet/resnet18_8xb16_cifar10.py'),
    teacher=dict(cfg_path='mmcls::resnet/resnet50_8xb16_cifar10.py', pretrained=True),
    calculate_student_loss=False,
    student_trainable=False,
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders=dict(last=dict(type='ModuleOutputs', source='backbone.layer4.1.conv2')),
        teacher_recorders=dict(last=dict(type='ModuleOutputs', source='backbone.layer4.2.conv3')),
        connectors=dict(
            translate=dict(type='Translator', in_channel=128, out_channel=factor_channels),
            paraphrase=dict(type='Paraphraser', phase='pretrain', in_channel=512, out_channel=factor_channels)),
        distill_losses=dict(loss_reconstruct=dict(type='L2Loss', loss_weight=1.0)),
        loss_forward_mappings=dict(
            loss_reconstruct=dict(
                # both sides are the teacher's: the features and the paraphraser's reconstruction of them
                s_feature=dict(from_student=False, recorder='last'),
                t_feature=dict(from_student=False, recorder='last', connector='paraphrase')))))

train_cfg = dict(by_epoch=True, max_epochs=10)
