"""Zero-shot KT (Micaelli & Storkey 2019): an adversarial generator against a student that imitates.

The generator step *maximises* the student-teacher divergence (a negative loss weight, the teacher not
detached so gradients reach the generator through it); then ``student_iter`` student steps minimise the same
divergence plus attention transfer on four stages (``record_idx=1``: the block output, the ReLU's 2nd call).
"""

_base_ = ['mmrazor::_base_/cls_runtime.py', 'mmrazor::_base_/preprocessors.py']

# The teacher is ResNet-34: the last block of each stage is block 2, 3, 5, 2.
student_blocks = ['layer1.1', 'layer2.1', 'layer3.1', 'layer4.1']
teacher_blocks = ['layer1.2', 'layer2.3', 'layer3.5', 'layer4.2']

model = dict(
    _scope_='mmrazor',
    type='DataFreeDistillation',
    data_preprocessor=_base_.plain_norm,
    architecture=dict(cfg_path='mmcls::resnet/resnet18_8xb16_cifar10.py', pretrained=False),
    teachers=dict(
        deep=dict(
            build_cfg=dict(cfg_path='mmcls::resnet/resnet34_8xb16_cifar10.py', pretrained=True),
            ckpt_path='https://models.example.com/classifiers/resnet34_cifar.pth')),
    generator=dict(type='ZSKTGenerator', img_size=32, latent_dim=32, hidden_channels=16),
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders={
            **{f'stage{i + 1}': dict(type='ModuleOutputs', source=f'backbone.{b}.relu')
               for i, b in enumerate(student_blocks)},
            'logits': dict(type='ModuleOutputs', source='head.fc')},
        teacher_recorders={
            **{f'deep_stage{i + 1}': dict(type='ModuleOutputs', source=f'deep.backbone.{b}.relu')
               for i, b in enumerate(teacher_blocks)},
            'deep_logits': dict(type='ModuleOutputs', source='deep.head.fc')},
        distill_losses={
            **{f'loss_at{i}': dict(type='ATLoss', loss_weight=100.0) for i in range(1, 5)},
            'loss_soft': dict(type='KLDivergence', loss_weight=1.0, reduction='mean')},
        loss_forward_mappings={
            **{f'loss_at{i}': dict(
                s_feature=dict(from_student=True, recorder=f'stage{i}', record_idx=1),
                t_feature=dict(from_student=False, recorder=f'deep_stage{i}', record_idx=1)) for i in range(1, 5)},
            'loss_soft': dict(
                preds_S=dict(from_student=True, recorder='logits'),
                preds_T=dict(from_student=False, recorder='deep_logits'))}),
    generator_distiller=dict(
        type='ConfigurableDistiller',
        student_recorders=dict(logits=dict(type='ModuleOutputs', source='head.fc')),
        teacher_recorders=dict(deep_logits=dict(type='ModuleOutputs', source='deep.head.fc')),
        distill_losses=dict(
            loss_adversarial=dict(type='KLDivergence', loss_weight=-1.5, reduction='mean', teacher_detach=False)),
        loss_forward_mappings=dict(
            loss_adversarial=dict(
                preds_S=dict(from_student=True, recorder='logits'),
                preds_T=dict(from_student=False, recorder='deep_logits')))),
    student_iter=5)

optim_wrapper = dict(
    _delete_=True,
    constructor='mmrazor.SeparateOptimWrapperConstructor',
    architecture=dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=5e-4)),
    generator=dict(optimizer=dict(type='Adam', lr=1e-3)))

param_scheduler = dict(
    _delete_=True,
    architecture=dict(type='MultiStepLR', milestones=[3000, 6000], by_epoch=False),
    generator=dict(type='MultiStepLR', milestones=[3000, 6000], by_epoch=False))

train_cfg = dict(_delete_=True, by_epoch=False, max_iters=9000, val_interval=300)
