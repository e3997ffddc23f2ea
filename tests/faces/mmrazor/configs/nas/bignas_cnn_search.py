"""Evolution search over the trained BigNAS supernet under a MACs budget (millions, one 8x8 digit)."""

_base_ = './bignas_cnn_supernet.py'

train_cfg = dict(
    _delete_=True,
    type='mmrazor.EvolutionSearchLoop',
    dataloader=dict(batch_size=64, dataset=dict(type='mmcls.CustomDataset', data_prefix='data/digits')),
    evaluator=dict(type='Evaluator', metrics=[dict(type='mmcls.Accuracy', topk=(1, 5))]),
    estimator_cfg=dict(input_shape=(1, 1, 8, 8)),
    max_epochs=2,
    num_candidates=4,
    top_k=2,
    num_mutation=1,
    num_crossover=1,
    constraints_range=dict(flops=(0.0, 0.05)))
