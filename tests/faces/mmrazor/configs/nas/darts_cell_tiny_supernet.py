"""DARTS cells (our tiny space): 4 cells (two reduction), 2 nodes each; every edge mixes 4 ops, every node routes
its inputs by softmax(alpha) and keeps the top two. Second-order (unrolled) architecture updates."""

cell_ops = dict(
    type='mmrazor.DiffMutableOP',
    candidates=dict(
        zero=dict(type='mmrazor.DartsZero'),
        skip_connect=dict(type='mmrazor.DartsSkipConnect', use_drop_path=True),
        avg_pool_3x3=dict(type='mmrazor.DartsPoolBN', pool_type='avg'),
        sep_conv_3x3=dict(type='mmrazor.DartsSepConv', kernel_size=3)))

node_route = dict(type='mmrazor.DiffChoiceRoute', with_arch_param=True, num_chosen=2)

nas_backbone = dict(
    type='mmrazor.DartsBackbone',
    in_channels=3,
    base_channels=4,
    num_layers=4,
    num_nodes=2,
    stem_multiplier=2,
    out_indices=(3, ),
    mutable_cfg=cell_ops,
    route_cfg=node_route,
    norm_cfg=dict(type='BN', affine=False))

model = dict(
    type='mmrazor.Darts',
    architecture=dict(
        type='ImageClassifier',
        backbone=nas_backbone,
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=32)),
    mutator=dict(type='mmrazor.NasMutator'),
    unroll=True)

optim_wrapper = dict(
    constructor='mmrazor.SeparateOptimWrapperConstructor',
    architecture=dict(optimizer=dict(type='SGD', lr=0.025, momentum=0.9, weight_decay=3e-4)),
    mutator=dict(optimizer=dict(type='Adam', lr=3e-4, weight_decay=1e-3)))
