"""Runner settings of a small classification run: the keys an MMEngine runner reads, not slimkit.

slimkit only loads these (your own loop and batches replace them). They are here so that the configs built on
this file can replace whole blocks with ``_delete_=True`` and the tests can check what survived the merge.
"""

image_pipeline = [
    dict(_scope_='mmcls', type='RandomCrop', crop_size=32, padding=2),
    dict(_scope_='mmcls', type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(_scope_='mmcls', type='PackClsInputs'),
]

train_dataloader = dict(
    batch_size=32,
    num_workers=1,
    drop_last=True,
    dataset=dict(_scope_='mmcls', type='CIFAR10', data_prefix='data/small_images', pipeline=image_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True),
)
val_dataloader = dict(
    batch_size=64,
    num_workers=1,
    dataset=dict(_scope_='mmcls', type='CIFAR10', data_prefix='data/small_images', test_mode=True,
                 pipeline=[dict(_scope_='mmcls', type='PackClsInputs')]),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, 5))

optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=1e-4))
param_scheduler = dict(type='MultiStepLR', by_epoch=True, milestones=[30, 60], gamma=0.2)
train_cfg = dict(by_epoch=True, max_epochs=90, val_interval=5)
val_cfg = dict(type='ValLoop')
default_hooks = dict(logger=dict(type='LoggerHook', interval=20))
