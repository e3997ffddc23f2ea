"""BigNAS and once-for-all MobileNetV3 supernets (AttentiveMobileNetV3 in a SearchableImageClassifier).

Our own tiny configs under ``configs/nas`` use the keys of MMRazor's BigNAS and OFA configs. Checked: the elastic
dimensions are mutables with MMRazor's aliases, a sandwich step trains them, an exported subnet has the chosen
kernels and widths and computes what the supernet computes, a subnet file keyed by aliases builds a subnet, the
kernel arithmetic (centre crop, OFA's transform) and the refusals.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.errors import ConfigError
from slimkit.evaluation import count_parameters
from slimkit.faces.mmrazor.nas import (
    AttentiveMobileNetV3,
    DynamicLinearClsHead,
    LabelSmoothLoss,
    MutableValue,
    SearchableImageClassifier,
)
from slimkit.faces.mmrazor.nas.elastic_ops import ElasticDepthwiseConv2d, InputResizer, Resize
from slimkit.razor import BigNAS, MutableChannels, batch_loss, build, export_subnet, load_config
from slimkit.training import fit

NAS = Path(__file__).parent / "configs" / "nas"
BIGNAS, OFA = NAS / "bignas_attentive_mobilenet_tiny_supernet.py", NAS / "ofa_mobilenet_tiny_supernet.py"


def batches(size: int, n: int = 1, batch: int = 4, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random 0..255 RGB images with labels of 5 classes."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(batch, 3, size, size, generator=g) * 255, torch.randint(5, (batch,), generator=g))
            for _ in range(n)]


def test_bignas_config_trains_the_sandwich_and_exports_a_smaller_equal_subnet():
    torch.manual_seed(0)
    algo = build(load_config(BIGNAS).model)
    assert isinstance(algo, BigNAS) and isinstance(algo.architecture, SearchableImageClassifier)
    space = algo.mutator.search_space()
    assert space["backbone.layer2.kernel_size"] == [3, 5] and space["backbone.layer2.expand_ratio"] == [2, 3]
    assert space["backbone.layer3"] == [1, 2] and space["backbone.layer3.out_channels"] == [16, 24]
    assert space["input_resizer"] == [[32, 32], [40, 40]] and space["backbone.last_mutable_channels"] == [32, 48]
    assert len(algo.drop_blocks) == 4  # the blocks of layer2 and layer3 (backbone_dropout_stages=[2, 3])
    x, y = batches(28)[0]
    losses = algo(x, y, mode="loss")
    assert set(losses) == {"max_subnet.loss", "min_subnet.loss", "min_subnet.loss_kl", "random0_subnet.loss",
                           "random0_subnet.loss_kl"}
    before = {k: v.clone() for k, v in algo.state_dict().items()}
    fit(algo, batches(28), loss=batch_loss, steps=1, lr=1e-2, seed=0, progress=False, num_threads=1)
    changed = [k for k, v in algo.state_dict().items() if v.dtype.is_floating_point and not torch.equal(v, before[k])]
    # blocks with a shortcut start as the identity (their last norm's scale 0): that scale trains first
    assert "architecture.backbone.layer3.blocks.1.linear_conv.bn.weight" in changed
    assert "architecture.head.fc.weight" in changed
    subnet = {**algo.mutator.min_choices(), "backbone.layer2": 2, "backbone.layer2.kernel_size": 5}
    small = export_subnet(algo.architecture, subnet).eval()
    stage = small.backbone.layer2
    assert len(stage) == 2 and stage[1].depthwise_conv.conv.kernel_size == (5, 5)
    assert stage[0].expand_conv.conv.out_channels == 8 * 2 and stage[1].expand_conv.conv.in_channels == 16
    assert small.head.fc.in_features == 32 and isinstance(small.input_resizer, Resize)
    assert count_parameters(small) < count_parameters(algo.architecture) / 2
    algo.set_subnet(subnet)
    algo.eval()
    with torch.no_grad():
        assert torch.allclose(small(x), algo(x), atol=1e-5) and small(x).shape == (4, 5)


def test_ofa_config_fine_grained_mutables_and_subnet_file(caplog):
    torch.manual_seed(0)
    algo = build(load_config(OFA).model)  # the config spells it mutators=
    space = algo.mutator.search_space()
    assert space["backbone.layer2.blocks.1.kernel_size"] == [3, 5, 7]
    assert space["backbone.layer3.blocks.0.expand_ratio_se"] == [3, 4]
    fit(algo, batches(24, 2), loss=batch_loss, steps=2, lr=1e-2, seed=0, progress=False, num_threads=1)
    with caplog.at_level(logging.WARNING):
        small = build(load_config(NAS / "ofa_mobilenet_tiny_subnet.py").model, architecture=algo.architecture,
                      fix_subnet=str(NAS / "ofa_mobilenet_tiny_subnet.yaml"))
    assert "backbone.layers.1.0.expand_ratio_se" in caplog.text
    block = small.backbone.layer2[1]
    assert block.se.conv1.out_channels == 16  # make_divisible(16 x 3 / 4, 8)
    assert (block.expand_conv.conv.out_channels, block.depthwise_conv.conv.kernel_size) == (64, (3, 3))
    assert small.backbone.layer3[0].depthwise_conv.conv.kernel_size == (7, 7)
    assert count_parameters(small) < count_parameters(algo.architecture)
    x = batches(24)[0][0]
    algo.eval()
    with torch.no_grad():
        assert torch.allclose(small.eval()(x), algo.architecture(x), atol=1e-5)
    broken = {"input_shape": [24, 24]}
    with pytest.raises(ConfigError, match="does not set"):
        build(load_config(NAS / "ofa_mobilenet_tiny_subnet.py").model, architecture=algo.architecture,
              fix_subnet=broken)


def test_elastic_kernels_centre_crop_and_ofa_transform():
    torch.manual_seed(0)
    width, kernel = MutableChannels([4, 8]), MutableValue([3, 5, 7])
    x = torch.randn(2, 4, 9, 9)
    crop = ElasticDepthwiseConv2d(width, kernel, stride=2)
    width.current_choice, kernel.current_choice = 4, 3
    expected = F.conv2d(x, crop.weight[:4, :, 2:5, 2:5], None, 2, 1, 1, 4)
    assert torch.allclose(crop(x), expected, atol=1e-6)
    ofa = ElasticDepthwiseConv2d(width, kernel, transform=True)
    assert sorted(ofa.transforms) == ["5to3", "7to5"]
    with torch.no_grad():
        ofa.transforms["7to5"].copy_(torch.randn(25, 25))
        ofa.transforms["5to3"].copy_(torch.randn(9, 9))
    five = (ofa.weight[:4, :, 1:6, 1:6].reshape(-1, 25) @ ofa.transforms["7to5"]).reshape(4, 1, 5, 5)
    three = (five[:, :, 1:4, 1:4].reshape(-1, 9) @ ofa.transforms["5to3"]).reshape(4, 1, 3, 3)
    assert torch.allclose(ofa.active_weight(), three, atol=1e-5)
    plain = ofa.export()
    assert isinstance(plain, nn.Conv2d) and plain.weight.shape == (4, 1, 3, 3) and plain.groups == 4
    assert torch.allclose(plain(x), ofa(x), atol=1e-5)
    kernel.current_choice = 7
    assert torch.equal(ofa.active_weight(), ofa.weight[:4])
    with pytest.raises(ConfigError, match="odd positive"):
        ElasticDepthwiseConv2d(8, MutableValue([2, 3]))


def test_head_loss_resizer_and_refusals():
    loss = LabelSmoothLoss(label_smooth_val=0.1, num_classes=5)
    scores, labels = torch.randn(3, 5), torch.tensor([0, 4, 2])
    target = F.one_hot(labels, 5) * 0.9 + 0.1 / 5
    assert float(loss(scores, labels)) == pytest.approx(float(-(target * scores.log_softmax(1)).sum(1).mean()),
                                                        rel=1e-5)
    resizer = InputResizer([[8, 8], [12, 12]])
    resizer.current_choice = [12, 12]
    assert resizer(torch.zeros(1, 3, 16, 16)).shape == (1, 3, 12, 12) and resizer.export().size == [12, 12]
    head = DynamicLinearClsHead(num_classes=5, in_channels=48)
    with pytest.raises(ConfigError, match="widest choice is 48"):
        head.connect_with_backbone(MutableChannels([16, 32]))
    arch = load_config(BIGNAS).nas_backbone
    with pytest.raises(ConfigError, match=r"\[min, max, step\]"):
        AttentiveMobileNetV3({**arch.arch_setting, "kernel_size": [[5, 3, 2]] * 3})
    with pytest.raises(ConfigError, match="conv_cfg"):
        AttentiveMobileNetV3(arch.arch_setting, out_indices=(3,), conv_cfg=dict(type="DeformConv2d"))
    with pytest.raises(ConfigError, match="3 stages need 3 num_blocks rows"):
        AttentiveMobileNetV3({**arch.arch_setting, "num_blocks": [[1, 1, 1]]})
    with pytest.raises(ConfigError, match="mutator or mutators"):
        BigNAS(build(load_config(BIGNAS).supernet), mutator=dict(type="NasMutator"),
               mutators=dict(type="NasMutator"))
    with pytest.raises(ConfigError, match="mode='original' or 'classy_vision'"):
        LabelSmoothLoss(0.1, mode="multi_label")
