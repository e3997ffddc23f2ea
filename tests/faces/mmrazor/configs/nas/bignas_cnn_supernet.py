"""BigNAS on the small searchable CNN (kernel, width and depth choices per stage), once-for-all style.

The largest subnet (widest, deepest, largest kernels) trains on the labels, the smallest and one random subnet
also learn from its logits (``head``).
"""

model = dict(
    _scope_='mmrazor',
    type='BigNAS',
    drop_path_rate=0.2,
    num_random_samples=1,
    backbone_dropout_stages=[6, 7],
    architecture=dict(type='SearchableCNN', stage_widths=[[8, 16], [16, 32]], kernel_choices=[3, 5],
                      depth_choices=[0, 1]),
    distiller=dict(
        type='ConfigurableDistiller',
        teacher_recorders=dict(fc=dict(type='ModuleOutputs', source='head')),
        student_recorders=dict(fc=dict(type='ModuleOutputs', source='head')),
        distill_losses=dict(loss_kl=dict(type='KLDivergence', tau=1, loss_weight=1)),
        loss_forward_mappings=dict(
            loss_kl=dict(
                preds_S=dict(recorder='fc', from_student=True),
                preds_T=dict(recorder='fc', from_student=False)))),
    mutator=dict(type='mmrazor.NasMutator'))

optim_wrapper_cfg = dict(type='OptimWrapper', clip_grad=dict(type='value', clip_value=0.2))
