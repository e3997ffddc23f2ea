"""A pruned RTMPose-shaped model rebuilt from its pruning structure: each input of a CSPLayer's concat (``main_conv``
with its blocks' residual stream, ``short_conv``) and of the SPPF block is its own unit, as MMRazor names them;
counts are rounded up to ``divisor``."""

_base_ = 'mmpose::body_2d_keypoint/rtmpose/coco/rtmpose-t_8xb256-420e_coco-256x192.py'

divisor = 2
fix_subnet = {
    'backbone.stem.2.conv_(0, 8)_8': 5,                                    # -> 6
    'backbone.stage1.1.main_conv.conv_(0, 8)_8': 6,                        # with blocks.0.conv2 (a residual)
    'backbone.stage1.1.short_conv.conv_(0, 8)_8': 3,                       # -> 4
    'backbone.stage3.1.final_conv.conv_(0, 64)_64': 0.5,                   # a ratio: 32
    'backbone.stage4.1.conv1.conv_(0, 64)_64': 40,                         # read four times by the SPPF concat
    'backbone.stage4.2.blocks.0.conv2.pointwise_conv.conv_(0, 64)_64': 21,  # -> 22 (no residual in stage 4)
    'backbone.stage4.2.final_conv.conv_(0, 128)_128': 100,                 # read by head.final_layer
}

model = dict(
    _delete_=True,
    _scope_='mmrazor',
    type='GroupFisherDeploySubModel',
    architecture=_base_.model,
    fix_subnet=fix_subnet,
    divisor=divisor,
)
