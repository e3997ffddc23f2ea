"""Deploy a pruning structure (unit -> kept channels or ratio) on a fresh tiny ResNet-18, widths a multiple of 4:
the shape of MMRazor's group_fisher / l1-norm *_deploy configs (the architecture comes from a skipped base)."""

_base_ = ['mmcls::resnet/resnet18_8xb16_cifar10.py']

fix_subnet = {
    'backbone.conv1_(0, 8)_8': 5,  # a count: rounded up to 8 by the divisor
    'backbone.layer1.0.conv1_(0, 8)_8': 0.5,  # a ratio: 4 channels
    'backbone.layer2.0.conv1_(0, 16)_16': 9,  # 12 after rounding
    'backbone.layer3.1.conv1_(0, 32)_32': 0.25,
}
divisor = 4

model = dict(
    _scope_='mmrazor',
    type='GroupFisherDeploySubModel',
    architecture=_base_.model,
    fix_subnet=fix_subnet,
    divisor=divisor,
)
