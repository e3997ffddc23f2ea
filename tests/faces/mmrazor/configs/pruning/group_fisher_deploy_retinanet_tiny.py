"""A pruned RetinaNet-shaped detector rebuilt from its pruning structure (what a GroupFisher run leaves),
channel counts rounded up to ``divisor``; units not named keep every channel."""

_base_ = 'mmdet::retinanet/retinanet_r50_fpn_1x_coco.py'

divisor = 4
fix_subnet = {
    'backbone.conv1_(0, 8)_8': 6,                 # 6 -> 8 after rounding: the whole unit
    'backbone.layer1.1.conv2_(0, 8)_8': 3,        # -> 4
    'backbone.layer2.0.conv3_(0, 64)_64': 40,     # the layer2 residual stream (conv3 + downsample)
    'backbone.layer3.2.conv1_(0, 32)_32': 0.5,    # a ratio: 16
    'backbone.layer4.0.conv3_(0, 256)_256': 130,  # -> 132
    'neck.fpn_convs.0.conv_(0, 16)_16': 10,       # -> 12
    'bbox_head.cls_convs.0.conv_(0, 16)_16': 7,   # -> 8
}

model = dict(
    _scope_='mmrazor',
    type='GroupFisherDeploySubModel',
    architecture=_base_.model,
    fix_subnet=fix_subnet,
    divisor=divisor,
)
