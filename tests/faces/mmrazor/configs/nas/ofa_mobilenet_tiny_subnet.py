"""A fixed subnet of the tiny once-for-all supernet, read from a subnet file keyed by MMRazor's aliases."""

_base_ = 'ofa_mobilenet_tiny_supernet.py'

model = dict(
    _scope_='mmrazor',
    type='sub_model',
    cfg=_base_.supernet,
    fix_subnet='ofa_mobilenet_tiny_subnet.yaml',
    init_weight_from_supernet=True)
