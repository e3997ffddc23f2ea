"""DCFF on a tiny top-down heatmap pose model: the backbone's last residual stream and the head's transposed convs
are pruned too (``head.deconv_layers.0`` reads the stream and produces a unit of its own)."""

_base_ = ['mmpose::_base_/default_runtime.py']

codec = dict(type='MSRAHeatmap', input_size=(32, 32), heatmap_size=(4, 4), sigma=2)

architecture = dict(
    type='mmpose.TopdownPoseEstimator',
    data_preprocessor=dict(type='mmpose.PoseDataPreprocessor', mean=[123.675, 116.28, 103.53],
                           std=[58.395, 57.12, 57.375], bgr_to_rgb=True),
    backbone=dict(type='mmpose.ResNet', depth=18, num_stages=4, out_indices=(3, )),
    # slimkit trains the masked full-width network, so the head reads all 64 channels here (MMRazor's fused
    # convs already output the kept ones and its config names that width)
    head=dict(type='mmpose.HeatmapHead', in_channels=64, out_channels=17, deconv_out_channels=(16, 16),
              loss=dict(type='mmpose.KeypointMSELoss', use_target_weight=True), decoder=codec))

stage_ratio_1 = 0.5
stage_ratio_2 = 0.75

target_pruning_ratio = {
    'backbone.layer3.0.conv1_(0, 32)_32': stage_ratio_1,
    'backbone.layer4.0.conv1_(0, 64)_64': stage_ratio_1,
    'backbone.layer4.0.conv2_(0, 64)_64': stage_ratio_2,  # the stream head.deconv_layers.0 reads
    'backbone.layer4.1.conv1_(0, 64)_64': stage_ratio_1,
    'head.deconv_layers.0_(0, 16)_16': stage_ratio_1,  # a transposed conv's output channels
    'head.deconv_layers.3_(0, 16)_16': stage_ratio_2,
}

optim_wrapper = dict(optimizer=dict(type='Adam', lr=5e-4), clip_grad=None)
train_cfg = dict(max_epochs=210, val_interval=10)

model = dict(
    _scope_='mmrazor',
    type='DCFF',
    architecture=architecture,
    mutator_cfg=dict(
        type='DCFFChannelMutator',
        channel_unit_cfg=dict(type='DCFFChannelUnit', default_args=dict(choice_mode='ratio')),
        parse_cfg=dict(type='ChannelAnalyzer', demo_input=(1, 3, 32, 32), tracer_type='BackwardTracer')),
    target_pruning_ratio=target_pruning_ratio,
    step_freq=1,
    linear_schedule=False)

val_cfg = dict(_delete_=True, type='mmrazor.ItePruneValLoop')
