"""What the SPOS configs share besides the search space: input normalisation, evaluation, optimisation.

The data blocks name a dataset of another package (slimkit reads no dataset: the search test passes batches
as ``dataloader=``); the evaluator is built (top-1 / top-5 accuracy of each candidate).
"""

preprocess_cfg = dict(mean=[127.5, 127.5, 127.5], std=[64.0, 64.0, 64.0], to_rgb=False)

val_dataloader = dict(
    batch_size=64,
    num_workers=1,
    dataset=dict(type='mmcls.CIFAR10', data_prefix='data/small_images', test_mode=True,
                 pipeline=[dict(_scope_='mmcls', type='ResizeEdge', scale=36, edge='short'),
                           dict(_scope_='mmcls', type='CenterCrop', crop_size=32),
                           dict(_scope_='mmcls', type='PackClsInputs')]),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(_scope_='mmcls', type='Accuracy', topk=(1, 5))
test_dataloader, test_evaluator = val_dataloader, val_evaluator  # one name for two blocks

train_dataloader = dict(
    batch_size=64,
    num_workers=1,
    dataset=dict(type='mmcls.CIFAR10', data_prefix='data/small_images',
                 pipeline=[dict(_scope_='mmcls', type='LoadImageFromFile'),
                           dict(_scope_='mmcls', type='RandomResizedCrop', scale=32),
                           dict(_scope_='mmcls', type='ColorJitter', brightness=0.2, contrast=0.2, saturation=0.2),
                           dict(_scope_='mmcls', type='RandomFlip', prob=0.5, direction='horizontal'),
                           dict(_scope_='mmcls', type='PackClsInputs')]),
    sampler=dict(type='DefaultSampler', shuffle=True))

optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.2, momentum=0.9, weight_decay=1e-4),
    paramwise_cfg=dict(bias_decay_mult=0.0, norm_decay_mult=0.0, dwconv_decay_mult=0.0))
param_scheduler = dict(type='PolyLR', power=1.0, eta_min=0.0, by_epoch=True, end=50, convert_to_iter_based=True)
train_cfg = dict(by_epoch=True, max_epochs=50)

# The evolution search both search configs run (each adds its budget and its FLOPs limit, in millions of MACs,
# measured on one 32x32 image).
evolution_search = dict(
    type='mmrazor.EvolutionSearchLoop',
    dataloader=val_dataloader,
    evaluator=val_evaluator,
    estimator_cfg=dict(input_shape=(1, 3, 32, 32)),
    top_k=2,
    score_key='accuracy/top1')
