"""Evolution search over the MobileNetV2 supernet under 2 M multiply-accumulates at 32x32."""

_base_ = ['./spos_mobilenet_supernet_tiny.py']

model = dict(norm_training=True)

# the loop spelled out in full here (the ShuffleNet search config unpacks the shared one)
train_cfg = dict(
    _delete_=True,
    type='mmrazor.EvolutionSearchLoop',
    dataloader=_base_.val_dataloader,
    evaluator=_base_.val_evaluator,
    estimator_cfg=dict(input_shape=(1, 3, 32, 32)),
    max_epochs=1,
    num_candidates=4,
    top_k=2,
    num_mutation=1,
    num_crossover=1,
    constraints_range=dict(flops=(0.0, 2.0)))
