"""A small MobileNetV2 search space: inverted residuals of kernel 3/5/7 and expansion 3/6, or a skip.

Rows are ``[channels, blocks, stride, mutable]``. The first block has a single candidate; the others may also
be skipped (``Identity``, a 1x1 conv where the shape changes).
"""

first_block = dict(
    _scope_='mmrazor',
    type='OneShotMutableOP',
    candidates=dict(k3_e1=dict(type='MBBlock', kernel_size=3, expand_ratio=1, act_cfg=dict(type='ReLU6'))))

later_block = dict(
    _scope_='mmrazor',
    type='OneShotMutableOP',
    candidates={
        **{f'k{k}_e{e}': dict(type='MBBlock', kernel_size=k, expand_ratio=e, act_cfg=dict(type='ReLU6'))
           for e in (3, 6) for k in (3, 5, 7)},
        'skip': dict(type='Identity')})

nas_backbone = dict(
    _scope_='mmrazor',
    type='SearchableMobileNetV2',
    first_channels=16,
    last_channels=96,
    widen_factor=1.0,
    arch_setting=[[16, 1, 1, first_block], [24, 2, 2, later_block], [32, 2, 2, later_block]],
    out_indices=(3,))  # the last 1x1 conv (after the three stages)
