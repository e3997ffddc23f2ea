"""Evolution search over the trained ShuffleNetV2 supernet, under 0.3 M multiply-accumulates at 32x32.

The limit is in MMRazor's units (millions of MACs); the space's subnets span about 0.24 to 0.39 M, so the
limit rules out the heaviest ones. Batch norms keep computing batch statistics while candidates are scored
(``norm_training``).
"""

_base_ = './spos_shufflenet_supernet_tiny.py'

model = dict(norm_training=True)

train_cfg = dict(
    _delete_=True,
    **_base_.evolution_search,
    max_epochs=2,
    num_candidates=4,
    num_mutation=1,
    num_crossover=1,
    mutate_prob=0.3,
    constraints_range=dict(flops=(0.0, 0.3)))
