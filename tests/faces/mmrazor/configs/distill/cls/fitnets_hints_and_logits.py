"""FitNets (Romero et al. 2015) hints on two stages plus KD on the logits: ResNet-18 <- ResNet-50 (base 16).

A ReLU runs more than once per residual block, so ``record_idx`` picks the call that gives the block's output
(the 2nd in a basic block, the 3rd in a bottleneck). The student's hints are widened to the teacher's by a
conv + batch norm connector (128 -> 512 channels in stage 4, 64 -> 256 in stage 3).
"""

_base_ = ['mmcls::_base_/datasets/imagenet_bs32.py', 'mmrazor::_base_/resnet18_from_resnet34.py']

model = dict(
    teacher=dict(cfg_path='mmcls::resnet/resnet50_8xb32_in1k.py'),  # replaces the pair's ResNet-34
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders=dict(
            stage4=dict(type='ModuleOutputs', source='backbone.layer4.1.relu'),
            stage3=dict(type='ModuleOutputs', source='backbone.layer3.1.relu'),
            logits=dict(type='ModuleOutputs', source='head.fc')),
        teacher_recorders=dict(
            stage4=dict(type='ModuleOutputs', source='backbone.layer4.2.relu'),
            stage3=dict(type='ModuleOutputs', source='backbone.layer3.5.relu'),
            logits=dict(type='ModuleOutputs', source='head.fc')),
        connectors=dict(
            hint4=dict(type='ConvModuleConnector', in_channel=128, out_channel=512, norm_cfg=dict(type='BN')),
            hint3=dict(type='ConvModuleConnector', in_channel=64, out_channel=256, norm_cfg=dict(type='BN'))),
        distill_losses=dict(
            loss_hint4=dict(type='L2Loss', loss_weight=5),
            loss_hint3=dict(type='L2Loss', loss_weight=5),
            loss_soft=dict(type='KLDivergence', tau=4, loss_weight=4, reduction='mean')),
        loss_forward_mappings=dict(
            loss_hint4=dict(
                s_feature=dict(from_student=True, recorder='stage4', record_idx=1, connector='hint4'),
                t_feature=dict(from_student=False, recorder='stage4', record_idx=2)),
            loss_hint3=dict(
                s_feature=dict(from_student=True, recorder='stage3', record_idx=1, connector='hint3'),
                t_feature=dict(from_student=False, recorder='stage3', record_idx=2)),
            loss_soft=dict(
                preds_S=dict(from_student=True, recorder='logits'),
                preds_T=dict(from_student=False, recorder='logits')))))
