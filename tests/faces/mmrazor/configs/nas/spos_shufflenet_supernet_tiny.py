"""SPOS (Guo et al. 2020) supernet training on the tiny ShuffleNetV2 space: one random path per step.

``supernet`` describes an MMCls classifier around the searchable backbone; slimkit builds the backbone from
``nas_backbone`` and you supply the classifier around it (``build(cfg.model, architecture=your_supernet)``).
"""

_base_ = [
    'mmrazor::_base_/nas/search_settings.py',
    'mmrazor::_base_/nas/shufflenet_tiny_space.py',
    'mmcls::_base_/default_runtime.py',
]

supernet = dict(
    _scope_='mmcls',
    type='ImageClassifier',
    data_preprocessor=_base_.preprocess_cfg,
    backbone=_base_.nas_backbone,
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=64,
        loss=dict(type='LabelSmoothLoss', num_classes=10, label_smooth_val=0.1, mode='original', loss_weight=1.0),
        topk=(1, 5)))

model = dict(type='mmrazor.SPOS', architecture=supernet, mutator=dict(type='mmrazor.NasMutator'))
