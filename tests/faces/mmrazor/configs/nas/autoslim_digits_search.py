"""Greedy channel slimming of the trained AutoSlim supernet to two budgets (millions of MACs on one 8x8 digit).

Batch norms compute batch statistics while candidates are scored (``bn_training_mode``): the shared running
statistics fit no single width.
"""

_base_ = './autoslim_digits_supernet.py'

model = dict(bn_training_mode=True)

train_cfg = None
optim_wrapper = None

test_cfg = dict(
    _delete_=True,
    type='mmrazor.AutoSlimGreedySearchLoop',
    dataloader=dict(batch_size=64, dataset=dict(type='mmcls.CustomDataset', data_prefix='data/digits')),
    evaluator='Accuracy',
    estimator_cfg=dict(input_shape=(1, 1, 8, 8)),
    target_flops=(0.2, 0.1))
