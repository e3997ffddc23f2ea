"""BigNAS on a tiny AttentiveMobileNetV3 (3 stages, 32x32 or 40x40 inputs, 5 classes), keys as MMRazor's BigNAS
supernet config: an elastic kernel (3 or 5), expand ratio, depth and width per stage, attentive shortcuts, a
searchable input size, label-smoothed head on the backbone's last width."""

arch_setting = dict(
    kernel_size=[[3, 5, 2], [3, 5, 2], [3, 5, 2]],
    num_blocks=[[1, 1, 1], [1, 2, 1], [1, 2, 1]],
    expand_ratio=[[1, 1, 1], [2, 3, 1], [2, 3, 1], [4, 4, 1]],
    num_out_channels=[[8, 8, 8], [8, 16, 8], [16, 24, 8], [16, 24, 8], [32, 48, 16]])

nas_backbone = dict(
    type='AttentiveMobileNetV3',
    arch_setting=arch_setting,
    out_indices=(3, ),
    stride_list=[1, 2, 2],
    with_se_list=[False, True, True],
    act_cfg_list=['HSwish', 'ReLU', 'HSwish', 'HSwish', 'HSwish'],
    norm_cfg=dict(type='DynamicBatchNorm2d', momentum=0.0))

supernet = dict(
    _scope_='mmrazor',
    type='SearchableImageClassifier',
    data_preprocessor=dict(type='mmcls.ClsDataPreprocessor', mean=[127.5] * 3, std=[64.0] * 3, to_rgb=True),
    backbone=nas_backbone,
    neck=dict(type='SqueezeMeanPoolingWithDropout', drop_ratio=0.2),
    head=dict(
        type='DynamicLinearClsHead',
        num_classes=5,
        in_channels=48,
        loss=dict(type='mmcls.LabelSmoothLoss', num_classes=5, label_smooth_val=0.1, mode='original',
                  loss_weight=1.0),
        topk=(1, 5)),
    input_resizer_cfg=dict(input_sizes=[[32, 32], [40, 40]]),
    connect_head=dict(connect_with_backbone='backbone.last_mutable_channels'))

model = dict(
    _scope_='mmrazor',
    type='BigNAS',
    drop_path_rate=0.2,
    num_random_samples=1,
    backbone_dropout_stages=[2, 3],
    architecture=supernet,
    distiller=dict(
        type='ConfigurableDistiller',
        teacher_recorders=dict(fc=dict(type='ModuleOutputs', source='head.fc')),
        student_recorders=dict(fc=dict(type='ModuleOutputs', source='head.fc')),
        distill_losses=dict(loss_kl=dict(type='KLDivergence', tau=1, loss_weight=1)),
        loss_forward_mappings=dict(
            loss_kl=dict(
                preds_S=dict(recorder='fc', from_student=True),
                preds_T=dict(recorder='fc', from_student=False)))),
    mutator=dict(type='mmrazor.NasMutator'))
