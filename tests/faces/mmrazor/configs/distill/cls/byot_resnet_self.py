"""Be Your Own Teacher: a CIFAR ResNet-18 whose first three stages get shallow classifiers taught by its head.

Each stage's last ReLU feeds a BYOT connector (attention, separable convs up to 128 channels, pooling, a linear
classifier); its pooled feature learns the neck's feature, its logits the labels and the head's logits. Widths
are those of the small test ResNet (16 .. 128 channels) on 16x16 images.
"""

_base_ = ['mmcls::_base_/datasets/cifar100_bs16.py']

stage_connector = dict(type='BYOTConnector', out_channel=128, expansion=1, kernel_size=3, stride=2, pool_size=2,
                       num_classes=10)


stages = (1, 2, 3)

model = dict(
    _scope_='mmrazor',
    type='SelfDistill',
    architecture=dict(type='mmcls.ImageClassifier', backbone=dict(type='mmcls.ResNet_CIFAR', depth=18)),
    distiller=dict(
        type='BYOTDistiller',
        student_recorders={f'bb_s{i}': dict(type='ModuleOutputs', source=f'backbone.layer{i}.1.relu')
                           for i in stages},
        teacher_recorders=dict(
            fc=dict(type='ModuleOutputs', source='head.fc'),
            neck_gap=dict(type='ModuleOutputs', source='neck.gap'),
            gt_labels=dict(type='ModuleInputs', source='head.loss_module')),
        distill_losses={
            **{f'loss_fet_{i}': dict(type='L2Loss', normalize=False, loss_weight=0.03, dist=True) for i in stages},
            **{f'loss_label_{i}': dict(type='mmcls.CrossEntropyLoss', loss_weight=0.7) for i in stages},
            **{f'loss_softl_{i}': dict(type='KLDivergence', tau=3, loss_weight=0.3) for i in stages}},
        connectors={f'loss_s{i}_sfeat': dict(stage_connector, in_channel=16 * 2 ** (i - 1)) for i in stages},
        loss_forward_mappings={
            **{f'loss_fet_{i}': dict(
                s_feature=dict(recorder=f'bb_s{i}', from_student=True, connector=f'loss_s{i}_sfeat', connector_idx=0),
                t_feature=dict(recorder='neck_gap', from_student=False)) for i in stages},
            **{f'loss_label_{i}': dict(
                cls_score=dict(recorder=f'bb_s{i}', from_student=True, connector=f'loss_s{i}_sfeat', connector_idx=1),
                label=dict(recorder='gt_labels', from_student=False, data_idx=1)) for i in stages},
            **{f'loss_softl_{i}': dict(
                preds_S=dict(recorder=f'bb_s{i}', from_student=True, connector=f'loss_s{i}_sfeat', connector_idx=1),
                preds_T=dict(recorder='fc', from_student=False)) for i in stages}}))
