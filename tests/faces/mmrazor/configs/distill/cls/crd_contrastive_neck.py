"""Contrastive representation distillation (Tian et al. 2020) on the pooled features (ResNet-18 <- ResNet-50).

CRD keeps a memory bank with one embedding per training sample, so every batch must say which samples it
holds: ``data_samples`` is recorded as the second input of the whole model (``source=''``, ``data_idx=1``) and
the loaders are replaced wholesale (``_delete_=True``) by ones whose dataset returns each sample's index.
"""

_base_ = ['mmrazor::_base_/cls_runtime.py', 'mmrazor::_base_/resnet18_from_resnet34.py']

embedding = 16   # both sides are projected to this width
bank_size = 64   # samples in the (tiny) training set
negatives = 24   # drawn from the bank per positive

model = dict(
    architecture=dict(cfg_path='mmcls::resnet/resnet18_8xb16_cifar10.py'),
    teacher=dict(cfg_path='mmcls::resnet/resnet50_8xb16_cifar10.py', pretrained=True),
    teacher_ckpt='resnet50_cifar_teacher.pth',
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders=dict(
            pooled=dict(type='ModuleOutputs', source='neck.gap'),
            samples=dict(type='ModuleInputs', source='')),
        teacher_recorders=dict(pooled=dict(type='ModuleOutputs', source='neck.gap')),
        connectors=dict(
            embed_s=dict(type='CRDConnector', dim_in=128, dim_out=embedding),
            embed_t=dict(type='CRDConnector', dim_in=512, dim_out=embedding)),
        distill_losses=dict(
            loss_contrast=dict(type='CRDLoss', loss_weight=0.5, neg_num=negatives, sample_n=bank_size,
                               dim_out=embedding)),
        loss_forward_mappings=dict(
            loss_contrast=dict(
                s_feats=dict(from_student=True, recorder='pooled', connector='embed_s'),
                t_feats=dict(from_student=False, recorder='pooled', connector='embed_t'),
                data_samples=dict(from_student=True, recorder='samples', data_idx=1)))))

val_cfg = dict(_delete_=True, type='mmrazor.SingleTeacherDistillValLoop')

# CRDDataset wraps a dataset and adds each sample's index (and its negatives) to what the pipeline packs
images = dict(_scope_='mmcls', type='CIFAR10', data_prefix='data/small_images',
              pipeline=[dict(_scope_='mmrazor', type='PackCRDClsInputs')])
indexed = dict(_scope_='mmrazor', type='CRDDataset', neg_num=negatives, sample_mode='exact', percent=1.0)
train_dataloader = dict(_delete_=True, batch_size=8, dataset=dict(indexed, dataset=images),
                        sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(_delete_=True, batch_size=8, dataset=dict(indexed, dataset=dict(images, test_mode=True)),
                      sampler=dict(type='DefaultSampler', shuffle=False))
