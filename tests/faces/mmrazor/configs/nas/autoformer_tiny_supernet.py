"""Autoformer on a tiny vision-transformer space: 16x16 images in 4x4 patches, embedding 8 or 16, 1-2 blocks of
1-2 heads (4 channels each) and an MLP of 1x or 2x the widest embedding."""

arch_setting = dict(mlp_ratios=[1.0, 2.0], num_heads=[1, 2], depth=[1, 2], embed_dims=[8, 16])

nas_backbone = dict(
    _scope_='mmrazor',
    type='AutoformerBackbone',
    arch_setting=arch_setting,
    img_size=16,
    patch_size=4,
    head_dim=4)

model = dict(
    _scope_='mmrazor',
    type='Autoformer',
    architecture=dict(type='SearchableImageClassifier', backbone=nas_backbone, neck=None,
                      head=dict(type='DynamicLinearClsHead', num_classes=10, in_channels=16),
                      connect_head=dict(connect_with_backbone='backbone.last_mutable')),
    mutator=dict(type='mmrazor.NasMutator'))

train_cfg = dict(
    _delete_=True,
    type='mmrazor.EvolutionSearchLoop',
    dataloader=dict(batch_size=8, dataset=dict(type='mmcls.CIFAR10', data_prefix='data/small_images')),
    evaluator=dict(type='mmcls.Accuracy'),
    max_epochs=1,
    num_candidates=3,
    top_k=1,
    num_mutation=1,
    num_crossover=1,
    constraints_range=dict(params=(0, 0.003)))
