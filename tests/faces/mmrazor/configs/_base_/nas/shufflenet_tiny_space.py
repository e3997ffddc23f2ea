"""A small ShuffleNetV2 search space: three stages of two searchable blocks, four candidates per block.

Rows are ``[channels, blocks, mutable]``; ``widen_factor`` halves the channels (16, 32, 64). Without the last
1x1 layer the backbone's only output is stage 2's (64 channels).
"""

searchable_block = dict(
    _scope_='mmrazor',
    type='OneShotMutableOP',
    candidates=dict(
        dw3=dict(type='ShuffleBlock', kernel_size=3),
        dw5=dict(type='ShuffleBlock', kernel_size=5),
        dw7=dict(type='ShuffleBlock', kernel_size=7),
        xception=dict(type='ShuffleXception')))

nas_backbone = dict(
    _scope_='mmrazor',
    type='SearchableShuffleNetV2',
    widen_factor=0.5,
    arch_setting=[[32, 2, searchable_block], [64, 2, searchable_block], [128, 2, searchable_block]],
    with_last_layer=False,
    out_indices=(2,))
