"""Once-for-all on a tiny AttentiveMobileNetV3, keys as MMRazor's OFA supernet config: fine-grained mode (a kernel
size and expand ratio per block), OFA's transformed kernels (3, 5 or 7), squeeze-excite, plain residuals, global
average pooling, and the config's own spelling ``mutators``."""

arch_setting = dict(
    kernel_size=[[3, 3, 1], [3, 7, 2], [3, 7, 2]],
    num_blocks=[[1, 1, 1], [1, 2, 1], [1, 2, 1]],
    expand_ratio=[[1, 1, 1], [3, 4, 1], [3, 4, 1], [6, 6, 1]],
    num_out_channels=[[8, 8, 8], [8, 8, 8], [8, 16, 8], [16, 24, 8], [32, 40, 8]])

nas_backbone = dict(
    type='mmrazor.AttentiveMobileNetV3',
    arch_setting=arch_setting,
    out_indices=(3, ),
    stride_list=[1, 2, 2],
    with_se_list=[False, True, True],
    act_cfg_list=['HSwish', 'ReLU', 'ReLU', 'HSwish', 'HSwish'],
    conv_cfg=dict(type='OFAConv2d'),
    norm_cfg=dict(type='mmrazor.DynamicBatchNorm2d', momentum=0.1),
    fine_grained_mode=True,
    with_attentive_shortcut=False)

supernet = dict(
    _scope_='mmrazor',
    type='SearchableImageClassifier',
    backbone=nas_backbone,
    neck=dict(type='mmcls.GlobalAveragePooling'),
    head=dict(type='DynamicLinearClsHead', num_classes=5, in_channels=40,
              loss=dict(type='mmcls.CrossEntropyLoss', loss_weight=1.0)),
    input_resizer_cfg=dict(input_sizes=[[24, 24], [32, 32]]),
    connect_head=dict(connect_with_backbone='backbone.last_mutable_channels'))

model = dict(
    _scope_='mmrazor',
    type='BigNAS',
    drop_path_rate=0.2,
    num_random_samples=0,
    backbone_dropout_stages=[3],
    architecture=supernet,
    mutators=dict(type='mmrazor.NasMutator'))
