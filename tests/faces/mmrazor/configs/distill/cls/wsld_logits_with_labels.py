"""Weighted soft labels (Zhou et al. 2021) on the DKD config's recorders: same logits, same labels.

The losses and their mappings are replaced (``_delete_=True``); the recorders are inherited.
"""

_base_ = ['./dkd_logits_with_labels.py']

model = dict(
    distiller=dict(
        distill_losses=dict(_delete_=True, loss_weighted=dict(type='WSLD', tau=3, loss_weight=2.0)),
        loss_forward_mappings=dict(
            _delete_=True,
            loss_weighted=dict(
                student=dict(from_student=True, recorder='logits'),
                teacher=dict(from_student=False, recorder='logits'),
                gt_labels=dict(from_student=True, recorder='labels', data_idx=1)))))
