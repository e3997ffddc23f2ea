"""MMRazor's SPOS supernet / search / subnet configs, as shipped, with the user's classifier around the backbone.

The search space itself (``SearchableShuffleNetV2`` of ``ShuffleBlock`` / ``ShuffleXception`` candidates) is
built from the config; the user supplies the classifier around it (MMCls's ``ImageClassifier`` is not
slimkit's to build) and the data.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import torch

from slimkit.errors import ConfigError
from slimkit.razor import (
    SPOS,
    EvolutionSearchLoop,
    SearchableShuffleNetV2,
    ShuffleBlock,
    ShuffleXception,
    batch_loss,
    build,
    load_config,
    read_subnet,
)
from slimkit.training import fit
from tests.razor.mm_models import ImageClassifier

FIXTURES = Path(__file__).parents[1] / "fixtures" / "mmrazor"
SPOS_DIR = FIXTURES / "configs" / "nas" / "mmcls" / "spos"
IMAGENET = dict(input_shape=(1, 3, 224, 224))  # MMRazor's estimator counts FLOPs at this size


@pytest.fixture(scope="module")
def supernet() -> ImageClassifier:
    cfg = load_config(SPOS_DIR / "spos_shufflenet_supernet_8xb128_in1k.py")
    torch.manual_seed(0)
    backbone = build(cfg.nas_backbone)
    assert isinstance(backbone, SearchableShuffleNetV2)
    return ImageClassifier(backbone, 1024, num_classes=10)


def images(n: int = 2, batch: int = 4, size: int = 32, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(batch, 3, size, size, generator=g), torch.randint(10, (batch,), generator=g))
            for _ in range(n)]


def test_supernet_config_trains_one_path_per_step(supernet):
    cfg = load_config(SPOS_DIR / "spos_shufflenet_supernet_8xb128_in1k.py")
    spos = build(cfg.model, architecture=supernet)
    assert isinstance(spos, SPOS) and not spos.norm_training
    space = spos.mutator.search_space()
    assert len(space) == 20 and list(space)[:2] == ["backbone.layers.0.0", "backbone.layers.0.1"]
    assert space["backbone.layers.2.5"] == ["shuffle_3x3", "shuffle_5x5", "shuffle_7x7", "shuffle_xception"]
    paths = []
    result = fit(spos, images(), loss=batch_loss, steps=2, lr=1e-3, seed=0, progress=False, num_threads=1,
                 on_step=lambda step, loss: paths.append(spos.mutator.current_choices()))
    assert len(result.losses) == 2 and paths[0] != paths[1]


def test_search_config_meets_mmrazors_flops_range(supernet):
    cfg = load_config(SPOS_DIR / "spos_shufflenet_search_8xb128_in1k.py")
    spos = build(cfg.model, architecture=supernet)
    assert spos.norm_training  # model = dict(norm_training=True) merged into the supernet's SPOS
    spos.eval()
    assert all(m.training for m in spos.modules() if isinstance(m, torch.nn.BatchNorm2d))
    loop = build(cfg.train_cfg, model=spos, dataloader=images(1), estimator_cfg=IMAGENET, max_epochs=1,
                 num_candidates=3, top_k=2, num_mutation=1, num_crossover=1, progress=False)
    assert isinstance(loop, EvolutionSearchLoop) and loop.ranges == {"flops": (0.0, 660e6)}  # 330 M MACs
    result = loop.run()
    assert result.metrics["flops"] <= 660e6 and "accuracy/top1" in result.metrics and "accuracy/top5" in result.metrics
    assert all(entry["metrics"]["flops"] <= 660e6 for entry in result.top_k)
    assert set(result.best_subnet) == set(spos.mutator.search_space())


def test_an_unmeetable_range_is_reported_before_the_search(supernet):
    cfg = load_config(SPOS_DIR / "spos_shufflenet_search_8xb128_in1k.py")
    spos = build(cfg.model, architecture=supernet)
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"No subnet can meet constraints_range: flops must lie in \[0 M MACs .*, "
                                          r"100 M MACs .*\] but every subnet has flops in \[[0-9.]+ M MACs"):
        build(cfg.train_cfg, model=spos, dataloader=images(1), estimator_cfg=IMAGENET,
              constraints_range=dict(flops=(0, 100)), progress=False).run()
    assert time.perf_counter() - start < 60  # a few forwards, not a thousand samples
    with pytest.raises(ConfigError, match="units='mmrazor'"):  # the same number read as raw FLOPs
        build(cfg.train_cfg, model=spos, dataloader=images(1), estimator_cfg=IMAGENET, units="slimkit",
              progress=False).run()


def test_subnet_config_fixes_the_shipped_subnet(supernet, monkeypatch, caplog):
    monkeypatch.chdir(FIXTURES)  # fix_subnet='configs/nas/mmcls/spos/SPOS_SUBNET.yaml' is relative to MMRazor's root
    cfg = load_config(SPOS_DIR / "spos_shufflenet_subnet_8xb128_in1k.py")
    with caplog.at_level(logging.INFO):
        subnet = build(cfg.model, architecture=supernet)
    assert "is not read" in caplog.text  # the pretrained checkpoint URL of init_cfg
    first, xception = subnet.backbone.layers[0][0], subnet.backbone.layers[1][0]
    assert isinstance(first, ShuffleBlock) and first.branch2[1][0].kernel_size == (7, 7)  # shuffle_7x7
    assert isinstance(xception, ShuffleXception)
    assert not any(type(m).__name__ == "OneShotMutableOP" for m in subnet.modules())
    spos = SPOS(supernet)
    spos.set_subnet(read_subnet(SPOS_DIR / "SPOS_SUBNET.yaml"))
    x = torch.rand(2, 3, 32, 32)
    supernet.eval()
    subnet.eval()
    with torch.no_grad():
        assert torch.equal(subnet(x), supernet(x))


def test_mobilenet_configs_build_and_a_missing_subnet_file_is_named():
    cfg = load_config(SPOS_DIR / "spos_mobilenet_supernet_8xb128_in1k.py")
    torch.manual_seed(0)
    supernet = ImageClassifier(build(cfg.nas_backbone), 1728, num_classes=10)
    spos = build(cfg.model, architecture=supernet)
    assert len(spos.mutator.search_space()) == 22 and "identity" in spos.mutator.search_space()[
        "backbone.layer2.1"]
    fit(spos, images(1), loss=batch_loss, steps=1, lr=1e-3, seed=0, progress=False, num_threads=1)
    search = load_config(SPOS_DIR / "spos_mobilenet_search_8xb128_in1k.py")
    assert build(search.model, architecture=supernet).norm_training
    subnet = load_config(SPOS_DIR / "spos_mobilenet_subnet_8xb128_in1k.py")
    with pytest.raises(ConfigError, match="fix_subnet='configs/nas/spos/AngleNAS_SHUFFLENETV2_IN1k_2.0.yaml' does "
                                          "not exist"):
        build(subnet.model, architecture=supernet)
