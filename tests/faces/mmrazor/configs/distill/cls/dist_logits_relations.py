"""DIST (Huang et al. 2022): the KD config with its loss swapped for inter- and intra-class correlation.

A single-string ``_base_``; ``_delete_=True`` drops the inherited ``loss_soft`` so only DIST is computed.
"""

_base_ = './kd_logits_resnet.py'

model = dict(
    distiller=dict(
        distill_losses=dict(
            _delete_=True,
            loss_dist=dict(type='DISTLoss', inter_loss_weight=1.0, intra_loss_weight=2.0, tau=1, loss_weight=1.0)),
        loss_forward_mappings=dict(
            _delete_=True,
            loss_dist=dict(
                logits_S=dict(from_student=True, recorder='logits'),
                logits_T=dict(from_student=False, recorder='logits')))))

optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1, nesterov=True, momentum=0.9))
