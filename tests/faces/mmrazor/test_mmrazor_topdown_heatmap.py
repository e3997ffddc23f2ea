"""MMRazor's mmpose DCFF pruning from our own config in that shape: a top-down heatmap model whose head upsamples
with transposed convs (``head.deconv_layers``), pruned as a reader of the backbone and as producers."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from slimkit.engines.speedup import apply_kept_channels
from slimkit.evaluation import count_parameters
from slimkit.razor import DCFF, batch_loss, build, load_config
from slimkit.training import fit
from tests.faces.mmrazor.pose_models import TopdownPoseEstimator, heatmap_batches

CONFIG = Path(__file__).parent / "configs" / "pruning" / "dcff_topdown_heatmap_resnet18_tiny.py"


def test_dcff_topdown_heatmap_config_prunes_the_deconv_head_and_deploys():
    cfg = load_config(CONFIG)
    net, data = TopdownPoseEstimator(), heatmap_batches()
    base = copy.deepcopy(net)
    algo = build(cfg.model, architecture=net)
    assert isinstance(algo, DCFF)
    fit(algo, data, loss=batch_loss, steps=1, lr=5e-4, seed=0, progress=False, num_threads=1)
    assert not torch.equal(net.head.final_layer.weight, base.head.final_layer.weight)  # a training step ran
    x = data[0][0]
    algo.eval()
    with torch.no_grad():
        masked = algo(x, mode="tensor")
    small = algo.deploy()
    deconv0, deconv3 = small.head.deconv_layers[0], small.head.deconv_layers[3]
    # the stream keeps 48 of 64 (0.75), deconv 0 keeps 8 of 16 (its weight is [in, out, 4, 4]), deconv 3 keeps 12
    assert tuple(deconv0.weight.shape) == (48, 8, 4, 4) and tuple(deconv3.weight.shape) == (8, 12, 4, 4)
    assert (small.head.deconv_layers[1].num_features, small.head.final_layer.in_channels) == (8, 12)
    with torch.no_grad():
        out = small(x)
    assert out.shape == (2, 17, 4, 4)
    torch.testing.assert_close(out, masked, atol=1e-4, rtol=1e-4)
    assert count_parameters(small) < count_parameters(base)
    fresh = apply_kept_channels(TopdownPoseEstimator(), algo.kept_channels)
    fresh.load_state_dict(small.state_dict(), strict=True)
