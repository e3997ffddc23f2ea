"""MMRazor's pruning and NAS algorithms on detection, segmentation and pose shapes, from our own configs.

Each config is written as MMRazor's mmdet / mmseg / mmpose configs are (the model comes from a skipped scoped base
or is described for another package); the test passes a local model whose module names match
(``det_models.py``, ``pose_cspnext.py``), builds the algorithm, trains steps with slimkit's loop and checks the
pruned or chosen model is physically smaller, computes what the masked model computed and trains on.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from slimkit.errors import ConfigError
from slimkit.evaluation import count_parameters
from slimkit.razor import (
    DCFF,
    SPOS,
    GroupFisherAlgorithm,
    ShuffleBlock,
    ShuffleXception,
    batch_loss,
    build,
    load_config,
)
from slimkit.training import fit
from tests.faces.mmrazor.det_models import RetinaNet, faster_rcnn, pointrend, retinanet
from tests.faces.mmrazor.mm_models import images, out_channels
from tests.faces.mmrazor.pose_cspnext import keypoint_batches, rtmpose

CONFIGS = Path(__file__).parent / "configs"
X32 = images(3, size=32, batch=2)


def train(algo: nn.Module, data: list, steps: int, lr: float = 1e-3) -> list[float]:
    return fit(algo, data, loss=batch_loss, steps=steps, lr=lr, seed=0, progress=False, num_threads=1).losses


def deployed(algo: nn.Module, x: torch.Tensor) -> nn.Module:
    """Deploy; the physically pruned model computes what the masked one did."""
    algo.eval()
    with torch.no_grad():
        masked = algo(x, mode="tensor")
    small = algo.deploy()
    small.eval()
    with torch.no_grad():
        out = small(x)
    for a, b in zip(out if isinstance(out, tuple) else (out,), masked if isinstance(masked, tuple) else (masked,),
                    strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    return small


def trains_on(model: nn.Module, data: list) -> None:
    """One step of the model's own loss moves its weights (the result is a plain trainable module)."""
    before = [p.detach().clone() for p in model.parameters()]
    fit(model, data[:1], loss=lambda m, b: sum(m.loss(*b).values()), steps=1, lr=1e-2, seed=0, progress=False,
        num_threads=1)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


# --- GroupFisher: RetinaNet prune and deploy, RTMPose prune --------------------------------------------------
@pytest.mark.slow
def test_group_fisher_prunes_a_retinanet_while_it_trains_and_deploys_it_smaller():
    cfg = load_config(CONFIGS / "pruning" / "group_fisher_act_prune_retinanet_tiny.py")
    net = retinanet()
    before = count_parameters(net)
    algo = build(cfg.model, architecture=net)
    assert isinstance(algo, GroupFisherAlgorithm)
    names = [u.name for u in algo.mutator.mutable_units]
    assert "backbone.layer1.0.conv3_(0, 32)_32" in names and "bbox_head.cls_convs.0.conv_(0, 16)_16" in names
    losses = train(algo, X32, steps=4)
    assert len(algo.pruner.history) == 4 and all(torch.isfinite(torch.tensor(losses)))  # interval=1
    small = deployed(algo, X32[0][0])
    assert count_parameters(small) < before
    assert len(small(X32[0][0])) == 10  # 5 levels x (cls, reg)
    trains_on(small, X32)


@pytest.mark.slow
def test_group_fisher_deploy_config_rebuilds_a_retinanet_at_the_structure_rounded_to_the_divisor():
    cfg = load_config(CONFIGS / "pruning" / "group_fisher_deploy_retinanet_tiny.py")
    net = retinanet()
    before = count_parameters(net)
    small = build(cfg.model, architecture=net, dummy_input=X32[0][0][:1])
    widths = {name: out_channels(small, name) for name in (
        "backbone.conv1", "backbone.layer1.1.conv2", "backbone.layer2.0.conv3", "backbone.layer2.0.downsample.0",
        "backbone.layer2.1.conv3", "backbone.layer3.2.conv1", "backbone.layer4.0.conv3", "neck.fpn_convs.0.conv",
        "bbox_head.cls_convs.0.conv", "bbox_head.cls_convs.1.conv")}
    assert widths == {"backbone.conv1": 8, "backbone.layer1.1.conv2": 4, "backbone.layer2.0.conv3": 40,
                      "backbone.layer2.0.downsample.0": 40, "backbone.layer2.1.conv3": 40,
                      "backbone.layer3.2.conv1": 16, "backbone.layer4.0.conv3": 132, "neck.fpn_convs.0.conv": 12,
                      "bbox_head.cls_convs.0.conv": 8, "bbox_head.cls_convs.1.conv": 16}
    assert count_parameters(small) < before and len(small(X32[0][0])) == 10
    trains_on(small, X32)


@pytest.mark.slow
def test_group_fisher_prunes_an_rtmpose_model_traced_at_its_decoder_input_size():
    cfg = load_config(CONFIGS / "pruning" / "group_fisher_flops_prune_rtmpose_tiny.py")
    net = rtmpose(widen_factor=0.125, input_size=(64, 64))
    data = keypoint_batches(3, 2, (64, 64))
    before = count_parameters(net)
    algo = build(cfg.model, architecture=net)  # no demo_input: (1, 3, 64, 64) from head.decoder.input_size
    names = [u.name for u in algo.mutator.mutable_units]
    assert {"backbone.stem.0.conv_(0, 4)_4", "backbone.stage4.1.conv1.conv_(0, 64)_64",
            "backbone.stage4.2.final_conv.conv_(0, 128)_128"} <= set(names)
    assert not any(name.startswith("head.") for name in names)  # read by Linear layers: left whole
    train(algo, data, steps=4)
    assert len(algo.pruner.history) == 4
    small = deployed(algo, data[0][0])
    assert count_parameters(small) < before
    pred_x, pred_y = small(data[0][0])
    assert pred_x.shape == (2, 17, 128) and pred_y.shape == (2, 17, 128)
    trains_on(small, data)


@pytest.mark.slow
def test_group_fisher_deploy_config_cuts_an_rtmpose_model_per_concat_input():
    cfg = load_config(CONFIGS / "pruning" / "group_fisher_deploy_rtmpose_tiny.py")
    net = rtmpose(widen_factor=0.125, input_size=(64, 64))
    data = keypoint_batches(1, 2, (64, 64))
    before = count_parameters(net)
    small = build(cfg.model, architecture=net)
    stage1, stage4 = small.backbone.stage1[1], small.backbone.stage4

    def widths(conv: nn.Module) -> tuple[int, int]:
        return conv.in_channels, conv.out_channels

    assert widths(small.backbone.stem[2].conv) == (4, 6) and widths(small.backbone.stage1[0].conv) == (6, 16)
    assert widths(stage1.main_conv.conv) == (16, 6) and widths(stage1.short_conv.conv) == (16, 4)
    assert widths(stage1.blocks[0].conv2.pointwise_conv.conv) == (8, 6)  # the residual joins main_conv's unit
    assert widths(stage1.attention.fc) == (10, 10) and widths(stage1.final_conv.conv) == (10, 16)
    assert widths(small.backbone.stage3[1].final_conv.conv) == (64, 32)
    assert widths(stage4[1].conv1.conv) == (128, 40) and widths(stage4[1].conv2.conv) == (160, 128)
    assert widths(stage4[2].blocks[0].conv2.pointwise_conv.conv) == (64, 22)
    assert widths(stage4[2].attention.fc) == (86, 86) and widths(small.head.final_layer) == (100, 17)
    assert count_parameters(small) < before
    pred_x, pred_y = small(data[0][0])
    assert pred_x.shape == (2, 17, 128) and pred_y.shape == (2, 17, 128)
    trains_on(small, data)


def test_a_pose_model_without_a_decoder_input_size_asks_for_demo_input():
    cfg = load_config(CONFIGS / "pruning" / "group_fisher_flops_prune_rtmpose_tiny.py")
    net = rtmpose(widen_factor=0.125, input_size=(64, 64))
    del net.head.decoder
    with pytest.raises(ConfigError, match=r"tracing the model on an input of shape \(1, 3, 224, 224\) failed .*"
                                          r"set parse_cfg=dict\(type='ChannelAnalyzer', demo_input="):
        build(cfg.model, architecture=net)


def test_a_deploy_structure_naming_units_of_a_wider_detector_is_refused_with_the_real_names():
    cfg = load_config(CONFIGS / "pruning" / "group_fisher_deploy_retinanet_tiny.py")
    with pytest.raises(ConfigError, match=r"no channel unit 'backbone.layer1.0.conv1_\(0, 64\)_64' in this model\. "
                                          r".*Units: backbone.conv1_\(0, 8\)_8, backbone.layer1.0.conv1_\(0, 8\)_8, "):
        build(cfg.model, architecture=retinanet(depth=18, base=8), dummy_input=X32[0][0][:1],
              fix_subnet={"backbone.layer1.0.conv1_(0, 64)_64": 32})


# --- DCFF: Faster R-CNN and PointRend ------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("config, factory, expected", [
    ("dcff_faster_rcnn_tiny.py", faster_rcnn,
     {"backbone.layer1.0.conv1": 4, "backbone.layer3.5.conv2": 16, "backbone.layer2.0.conv3": 48,
      "backbone.layer4.0.downsample.0": 192, "neck.lateral_convs.0.conv": 16, "rpn_head.rpn_conv": 16}),
    ("dcff_pointrend_tiny.py", pointrend,
     {"backbone.layer1.0.conv1": 4, "backbone.layer3.1.conv1": 20, "backbone.layer4.2.conv2": 48,
      "backbone.layer2.0.conv3": 64, "decode_head.0.conv_seg": 10, "decode_head.1.fcs.0": 16}),
])
def test_dcff_prunes_detection_and_segmentation_backbones_to_the_configured_ratios(config, factory, expected):
    cfg = load_config(CONFIGS / "pruning" / config)
    net = factory()
    before = count_parameters(net)
    algo = build(cfg.model, architecture=net)
    assert isinstance(algo, DCFF)
    train(algo, X32, steps=2)
    small = deployed(algo, X32[0][0])
    assert {name: out_channels(small, name) for name in expected} == expected
    assert count_parameters(small) < 0.8 * before
    trains_on(small, X32)


def test_dcff_refuses_a_ratio_above_one_naming_the_unit():
    cfg = load_config(CONFIGS / "pruning" / "dcff_pointrend_tiny.py")
    ratios = dict(cfg.model.target_pruning_ratio)
    ratios["backbone.layer4.0.conv1_(0, 64)_64"] = 1.5
    with pytest.raises(ConfigError, match=r"backbone.layer4.0.conv1_\(0, 64\)_64"):
        build(cfg.model, architecture=pointrend(), target_pruning_ratio=ratios)


# --- DetNAS: supernet and subnet ---------------------------------------------------------------------------
def detnas_supernet(cfg) -> RetinaNet:
    """The detector the config's ``supernet`` describes, around the backbone built from it."""
    torch.manual_seed(0)
    spec = cfg.supernet
    return RetinaNet(build(spec.backbone), spec.neck.in_channels, spec.neck.out_channels, spec.bbox_head.num_classes)


@pytest.mark.slow
def test_detnas_trains_a_detector_supernet_and_exports_the_chosen_subnet_smaller():
    sup_cfg = load_config(CONFIGS / "nas" / "detnas_retina_shufflenet_tiny_supernet.py")
    net = detnas_supernet(sup_cfg)
    spos = build(sup_cfg.model, architecture=net)
    assert isinstance(spos, SPOS)
    assert list(spos.mutator.search_space()) == [f"backbone.layers.{i}.{j}" for i in range(3) for j in range(2)]
    paths = []
    result = fit(spos, X32, loss=batch_loss, steps=4, lr=3e-3, seed=0, progress=False, num_threads=1,
                 on_step=lambda step, loss: paths.append(tuple(spos.mutator.current_choices().values())))
    assert len(result.losses) == 4 and len(set(paths)) > 1  # a random path per step
    supernet_params = count_parameters(net)
    sub_cfg = load_config(CONFIGS / "nas" / "detnas_retina_shufflenet_tiny_subnet.py")
    subnet = build(sub_cfg.model, architecture=copy.deepcopy(net))
    chosen = yaml.safe_load(Path(sub_cfg.model.fix_subnet).read_text())
    for name, entry in chosen.items():
        block = subnet.get_submodule(name)
        assert isinstance(block, ShuffleXception if entry["chosen"] == "xception" else ShuffleBlock), name
    assert subnet.get_submodule("backbone.layers.2.0").branch2[1][0].kernel_size == (7, 7)
    assert count_parameters(subnet) < supernet_params
    spos.set_subnet({name: entry["chosen"] for name, entry in chosen.items()})
    spos.eval()
    subnet.eval()
    with torch.no_grad():  # the exported subnet is the supernet's path, weights included
        for a, b in zip(subnet(X32[0][0]), spos.architecture(X32[0][0]), strict=True):
            torch.testing.assert_close(a, b)
    trains_on(subnet, X32)


def test_detnas_subnets_with_an_unknown_candidate_or_a_missing_block_are_refused(tmp_path):
    cfg = load_config(CONFIGS / "nas" / "detnas_retina_shufflenet_tiny_subnet.py")
    chosen = yaml.safe_load(Path(cfg.model.fix_subnet).read_text())
    bad = tmp_path / "subnet.yaml"
    bad.write_text(yaml.safe_dump({**chosen, "backbone.layers.2.0": {"chosen": "dw9"}}))
    with pytest.raises(ConfigError, match="dw9"):
        build(cfg.model, architecture=detnas_supernet(cfg), fix_subnet=str(bad))
    bad.write_text(yaml.safe_dump({k: v for k, v in chosen.items() if k != "backbone.layers.1.1"}))
    with pytest.raises(ConfigError, match=r"The subnet does not set 'backbone.layers.1.1'; give a choice for every "
                                          r"mutable"):
        build(cfg.model, architecture=detnas_supernet(cfg), fix_subnet=str(bad))
