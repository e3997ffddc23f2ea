"""Decoupled KD (Zhao et al. 2022): target and non-target class terms, which need each sample's label.

The labels are recorded as the inputs of ``head.loss_module`` (what an MMCls classifier's head receives);
``data_idx=1`` picks the labels out of that call's (scores, labels).
"""

_base_ = ['mmcls::_base_/datasets/imagenet_bs32.py', 'mmrazor::_base_/resnet18_from_resnet34.py']

logit_recorder = dict(type='ModuleOutputs', source='head.fc')

model = dict(
    distiller=dict(
        type='ConfigurableDistiller',
        student_recorders=dict(
            logits=logit_recorder,
            labels=dict(type='ModuleInputs', source='head.loss_module')),
        teacher_recorders=dict(logits=logit_recorder),
        distill_losses=dict(loss_decoupled=dict(type='DKDLoss', tau=2, beta=2.0, loss_weight=1, reduction='mean')),
        loss_forward_mappings=dict(
            loss_decoupled=dict(
                preds_S=dict(from_student=True, recorder='logits'),
                preds_T=dict(from_student=False, recorder='logits'),
                gt_labels=dict(from_student=True, recorder='labels', data_idx=1)))))
