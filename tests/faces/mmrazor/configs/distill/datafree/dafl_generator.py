"""DAFL (Chen et al. 2019): distillation without data; a generator learns images the teacher is sure about.

Each step draws one batch of generated images. The generator's losses (``generator_distiller``) ask the
teacher's answers to be one-hot, its classes to be balanced across the batch and its pooled features to be
large; the student learns the teacher's logits on the same images. Two optimizers (``SeparateOptimWrapper``
style); the runtime base's single optimizer, schedule and loop are replaced with ``_delete_=True``.
"""

_base_ = ['mmrazor::_base_/cls_runtime.py', 'mmrazor::_base_/preprocessors.py']

model = dict(
    _scope_='mmrazor',
    type='DAFLDataFreeDistillation',
    data_preprocessor=_base_.plain_norm,
    architecture=dict(cfg_path='mmcls::resnet/resnet18_8xb16_cifar10.py', pretrained=False),
    teachers=dict(
        wide=dict(
            build_cfg=dict(cfg_path='mmcls::resnet/resnet34_8xb16_cifar10.py', pretrained=True),
            ckpt_path='https://models.example.com/classifiers/resnet34_cifar.pth')),
    generator=dict(type='DAFLGenerator', img_size=32, latent_dim=48, hidden_channels=16),
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders=dict(logits=dict(type='ModuleOutputs', source='head.fc')),
        teacher_recorders=dict(wide_logits=dict(type='ModuleOutputs', source='wide.head.fc')),
        distill_losses=dict(loss_soft=dict(type='KLDivergence', tau=4, loss_weight=1)),
        loss_forward_mappings=dict(
            loss_soft=dict(
                preds_S=dict(from_student=True, recorder='logits'),
                preds_T=dict(from_student=False, recorder='wide_logits')))),
    generator_distiller=dict(
        type='ConfigurableDistiller',
        teacher_recorders=dict(
            wide_pooled=dict(type='ModuleOutputs', source='wide.neck.gap'),
            wide_logits=dict(type='ModuleOutputs', source='wide.head.fc')),
        distill_losses=dict(
            loss_onehot=dict(type='OnehotLikeLoss', loss_weight=0.1),
            loss_balance=dict(type='InformationEntropyLoss', loss_weight=4),
            loss_activation=dict(type='ActivationLoss', loss_weight=0.02)),
        loss_forward_mappings=dict(
            loss_onehot=dict(preds_T=dict(from_student=False, recorder='wide_logits')),
            loss_balance=dict(preds_T=dict(from_student=False, recorder='wide_logits')),
            loss_activation=dict(feat_T=dict(from_student=False, recorder='wide_pooled')))))

model_wrapper_cfg = dict(type='mmengine.MMSeparateDistributedDataParallel', broadcast_buffers=False)

optim_wrapper = dict(
    _delete_=True,
    constructor='mmrazor.SeparateOptimWrapperConstructor',
    architecture=dict(optimizer=dict(type='AdamW', lr=5e-3)),
    generator=dict(optimizer=dict(type='AdamW', lr=2e-3)))

param_scheduler = dict(
    _delete_=True,
    architecture=[dict(type='LinearLR', start_factor=0.01, by_epoch=False, end=100),
                  dict(type='MultiStepLR', begin=100, milestones=[2000, 4000], by_epoch=False)],
    generator=dict(type='LinearLR', start_factor=0.01, by_epoch=False, end=100))

train_cfg = dict(_delete_=True, by_epoch=False, max_iters=6000, val_interval=200)
train_dataloader = dict(batch_size=64, sampler=dict(type='InfiniteSampler', shuffle=True))
default_hooks = dict(checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=200, max_keep_ckpts=1))
randomness = dict(seed=None, diff_rank_seed=True)
