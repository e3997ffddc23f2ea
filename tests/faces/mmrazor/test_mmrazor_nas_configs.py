"""SPOS supernet / search / subnet configs on two tiny search spaces (ShuffleNetV2 and MobileNetV2 blocks).

The search space (the searchable backbone and its candidate blocks) is built from the config; the user supplies
the classifier around it (``mm_models.ImageClassifier``: MMCls's module names) and the data.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from slimkit.errors import ConfigError
from slimkit.razor import (
    SPOS,
    EvolutionSearchLoop,
    MBBlock,
    SearchableMobileNetV2,
    SearchableShuffleNetV2,
    ShuffleBlock,
    ShuffleXception,
    batch_loss,
    build,
    load_config,
    read_subnet,
)
from slimkit.training import fit
from tests.faces.mmrazor.mm_models import ImageClassifier, images

CONFIGS = Path(__file__).parent / "configs"
NAS = CONFIGS / "nas"


def supernet_of(config: str) -> ImageClassifier:
    """The classifier the config's ``supernet`` describes, around the backbone built from ``nas_backbone``."""
    cfg = load_config(NAS / config)
    torch.manual_seed(0)
    head = cfg.supernet.head
    return ImageClassifier(build(cfg.nas_backbone), head.in_channels, num_classes=head.num_classes)


@pytest.fixture(scope="module")
def shufflenet() -> ImageClassifier:
    """The ShuffleNetV2 supernet after a few SPOS steps (shared by the search and subnet tests)."""
    net = supernet_of("spos_shufflenet_supernet_tiny.py")
    fit(build(load_config(NAS / "spos_shufflenet_supernet_tiny.py").model, architecture=net), images(2),
        loss=batch_loss, steps=4, lr=3e-3, seed=0, progress=False, num_threads=1)
    return net


def path_loss(spos: SPOS, subnet: dict, batch: tuple) -> float:
    """The cross-entropy of one fixed path on ``batch`` (batch statistics in the norms)."""
    spos.set_subnet(subnet)
    spos.architecture.train()
    with torch.no_grad():
        return float(F.cross_entropy(spos.architecture(batch[0]), batch[1]))


def test_shufflenet_supernet_config_trains_one_random_path_per_step():
    cfg = load_config(NAS / "spos_shufflenet_supernet_tiny.py")
    # the runner's blocks load as written (slimkit builds none of them: your batches replace them)
    assert [step.type for step in cfg.train_dataloader.dataset.pipeline] == [
        "LoadImageFromFile", "RandomResizedCrop", "ColorJitter", "RandomFlip", "PackClsInputs"]
    assert cfg.test_dataloader == cfg.val_dataloader and cfg.param_scheduler.type == "PolyLR"
    assert cfg.supernet.data_preprocessor.mean == [127.5, 127.5, 127.5]  # _base_.preprocess_cfg
    net = supernet_of("spos_shufflenet_supernet_tiny.py")
    assert isinstance(net.backbone, SearchableShuffleNetV2)
    widths, x = [], net.backbone.conv1(torch.rand(1, 3, 32, 32))
    for stage in net.backbone.layers:
        x = stage(x)
        widths.append(x.shape[1])
    assert widths == [16, 32, 64]  # widen_factor=0.5 of 32, 64, 128
    spos = build(cfg.model, architecture=net)
    assert isinstance(spos, SPOS) and not spos.norm_training
    space = spos.mutator.search_space()
    assert list(space) == [f"backbone.layers.{i}.{j}" for i in range(3) for j in range(2)]
    assert all(choices == ["dw3", "dw5", "dw7", "xception"] for choices in space.values())
    data = images(1)
    probe = {name: "dw5" for name in space}
    first = path_loss(spos, probe, data[0])
    paths = []
    result = fit(spos, data, loss=batch_loss, steps=6, lr=3e-3, seed=0, progress=False, num_threads=1,
                 on_step=lambda step, loss: paths.append(spos.mutator.current_choices()))
    assert len(result.losses) == 6 and len({tuple(p.values()) for p in paths}) > 1  # different paths
    assert path_loss(spos, probe, data[0]) < first  # the shared weights learned


def test_search_config_finds_a_subnet_under_its_flops_limit(shufflenet):
    cfg = load_config(NAS / "spos_shufflenet_search_tiny.py")
    assert cfg.train_cfg.dataloader.batch_size == 64  # the shared loop of configs/_base_/nas, unpacked
    assert "by_epoch" not in cfg.train_cfg and cfg.train_cfg.num_candidates == 4  # _delete_: no merge
    spos = build(cfg.model, architecture=shufflenet)
    assert spos.norm_training  # model = dict(norm_training=True) merged into the supernet config's SPOS
    spos.eval()
    assert all(m.training for m in spos.modules() if isinstance(m, torch.nn.BatchNorm2d))
    loop = build(cfg.train_cfg, model=spos, dataloader=images(1), progress=False)
    assert isinstance(loop, EvolutionSearchLoop)
    assert loop.ranges == {"flops": (0.0, 0.6e6)}  # 0.3 M MACs = 0.6 M FLOPs (slimkit counts 2 per MAC)
    space = spos.mutator.search_space()
    heaviest, lightest = ({name: choice for name in space} for choice in ("dw7", "dw3"))
    assert loop.cost(heaviest)["flops"] > 0.6e6 > loop.cost(lightest)["flops"]  # the limit rules subnets out
    result = loop.run()
    assert result.metrics["flops"] <= 0.6e6
    assert {"accuracy/top1", "accuracy/top5"} <= set(result.metrics)
    assert all(entry["metrics"]["flops"] <= 0.6e6 for entry in result.top_k)
    assert set(result.best_subnet) == set(space)


def test_an_unmeetable_flops_limit_is_reported_before_the_search(shufflenet):
    cfg = load_config(NAS / "spos_shufflenet_search_tiny.py")
    spos = build(cfg.model, architecture=shufflenet)
    with pytest.raises(ConfigError, match=r"No subnet can meet constraints_range: flops must lie in \[0 M MACs .*, "
                                          r"0\.1 M MACs .*\] but every subnet has flops in \[0\.2[0-9]* M MACs"):
        build(cfg.train_cfg, model=spos, dataloader=images(1), constraints_range=dict(flops=(0, 0.1)),
              progress=False).run()
    with pytest.raises(ConfigError, match="units='mmrazor'"):  # the same numbers read as raw FLOPs
        build(cfg.train_cfg, model=spos, dataloader=images(1), units="slimkit", progress=False).run()


def test_subnet_config_exports_the_ops_its_yaml_chose(shufflenet, caplog):
    cfg = load_config(NAS / "spos_shufflenet_subnet_tiny.py")
    assert cfg.model.type == "sub_model" and "mutator" not in cfg.model  # _base_.model replaced, not merged
    yaml_file = Path(cfg.model.fix_subnet)
    assert yaml_file == NAS / "spos_shufflenet_subnet_tiny.yaml"  # {{fileDirname}} is the config's folder
    with caplog.at_level(logging.INFO):
        subnet = build(cfg.model, architecture=shufflenet)
    assert "is not read" in caplog.text  # init_cfg's checkpoint URL
    chosen = {name: entry["chosen"] for name, entry in yaml.safe_load(yaml_file.read_text()).items()}
    for name, choice in chosen.items():
        block = subnet.get_submodule(name)
        if choice == "xception":
            assert isinstance(block, ShuffleXception), name
        else:
            kernel = int(re.fullmatch(r"dw(\d)", choice).group(1))
            assert isinstance(block, ShuffleBlock) and block.branch2[1][0].kernel_size == (kernel, kernel), name
    assert not any(type(m).__name__ == "OneShotMutableOP" for m in subnet.modules())
    spos = SPOS(shufflenet)
    spos.set_subnet(read_subnet(yaml_file))
    x = torch.rand(2, 3, 32, 32)
    shufflenet.eval()
    subnet.eval()
    with torch.no_grad():
        assert torch.equal(subnet(x), shufflenet(x))  # the export computes what the supernet's path does


def test_mobilenet_configs_train_search_and_fix_a_subnet_read_from_the_working_directory(monkeypatch, tmp_path):
    net = supernet_of("spos_mobilenet_supernet_tiny.py")
    assert isinstance(net.backbone, SearchableMobileNetV2)
    spos = build(load_config(NAS / "spos_mobilenet_supernet_tiny.py").model, architecture=net)
    space = spos.mutator.search_space()
    assert space["backbone.layer1.0"] == ["k3_e1"] and len(space) == 5
    assert space["backbone.layer2.1"] == ["k3_e3", "k5_e3", "k7_e3", "k3_e6", "k5_e6", "k7_e6", "skip"]
    fit(spos, images(1), loss=batch_loss, steps=2, lr=1e-3, seed=0, progress=False, num_threads=1)

    search = load_config(NAS / "spos_mobilenet_search_tiny.py")
    loop = build(search.train_cfg, model=build(search.model, architecture=net), dataloader=images(1), progress=False)
    assert loop.run().metrics["flops"] <= 4e6  # 2 M MACs

    subnet_cfg = load_config(NAS / "spos_mobilenet_subnet_tiny.py")
    assert set(subnet_cfg.model) == {"_scope_", "type", "cfg", "fix_subnet"}  # _delete_=True: SPOS keys gone
    monkeypatch.chdir(tmp_path)  # fix_subnet is relative to the working directory, which lacks it here
    with pytest.raises(ConfigError, match="fix_subnet='nas/spos_mobilenet_subnet_tiny.yaml' does not exist"):
        build(subnet_cfg.model, architecture=net)
    monkeypatch.chdir(CONFIGS)
    subnet = build(subnet_cfg.model, architecture=net)
    assert type(subnet.backbone.layer2[1]).__name__ == "SearchableIdentity"  # chosen: skip
    for name, kernel, expand in (("backbone.layer2.0", 5, 6), ("backbone.layer3.0", 3, 3), ("backbone.layer3.1", 7, 6)):
        block = subnet.get_submodule(name)
        depthwise = block.depthwise_conv[0]
        assert isinstance(block, MBBlock) and depthwise.kernel_size == (kernel, kernel), name
        assert depthwise.out_channels == expand * block.expand_conv[0].in_channels, name
