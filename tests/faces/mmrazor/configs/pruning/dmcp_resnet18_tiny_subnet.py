"""The DMCP subnet of the tiny CIFAR ResNet-18 (MMRazor's ``sub_model`` with ``mode='mutator'``): a channel mutator's
dump picks each unit's width; one unit asks for more channels than it has (as MMRazor's DMCP_MBV2_100M.json does),
which keeps the whole unit with a warning."""

_base_ = ['dmcp_resnet18_tiny_supernet.py']

model = dict(
    _scope_='mmrazor',
    type='sub_model',
    cfg=_base_.supernet,
    fix_subnet='{{fileDirname}}/dmcp_resnet18_tiny_subnet.json',
    mode='mutator')

_base_.model_wrapper_cfg = None
