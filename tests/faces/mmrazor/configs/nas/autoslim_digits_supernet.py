"""AutoSlim on the zoo's digits CNN: widths of 1/4 .. 4/4 of each layer (multiples of 4), the sandwich rule.

The architecture is a plain CNN; AutoSlim traces its channels on one 8x8 digit (``parse_cfg.demo_input``) and
makes every group of coupled channels a width choice. The largest subnet teaches the others through the logits.
"""

model = dict(
    _scope_='mmrazor',
    type='AutoSlim',
    num_random_samples=1,
    architecture=dict(type='ZooModel', name='digits_cnn', pretrained=False),
    distiller=dict(
        type='ConfigurableDistiller',
        teacher_recorders=dict(fc=dict(type='ModuleOutputs', source='classifier.3')),
        student_recorders=dict(fc=dict(type='ModuleOutputs', source='classifier.3')),
        distill_losses=dict(loss_kl=dict(type='KLDivergence', tau=1, loss_weight=1)),
        loss_forward_mappings=dict(
            loss_kl=dict(
                preds_S=dict(recorder='fc', from_student=True),
                preds_T=dict(recorder='fc', from_student=False)))),
    mutator=dict(
        type='OneShotChannelMutator',
        channel_unit_cfg=dict(
            type='OneShotMutableChannelUnit',
            default_args=dict(candidate_choices=[i / 4 for i in range(1, 5)], choice_mode='ratio', divisor=4)),
        parse_cfg=dict(type='ChannelAnalyzer', demo_input=(1, 1, 8, 8), tracer_type='BackwardTracer')))

optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=1e-4))
train_cfg = dict(by_epoch=True, max_epochs=10)
