"""Autoformer on our tiny transformer space: entangled widths, one random subnet per step, a parameter-budget search
and an export whose layers have the chosen widths and compute what the supernet computes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from slimkit.engines.nas import DynamicLinear, export_subnet
from slimkit.errors import ConfigError
from slimkit.evaluation import count_parameters
from slimkit.razor import Autoformer, AutoformerBackbone, batch_loss, build, load_config
from slimkit.training import fit
from tests.faces.mmrazor.mm_models import images

CONFIG = Path(__file__).parent / "configs" / "nas" / "autoformer_tiny_supernet.py"


def supernet() -> nn.Sequential:
    """The config's backbone with a head sharing its embedding width (MMRazor's ``connect_head``)."""
    cfg = load_config(CONFIG)
    torch.manual_seed(0)
    backbone = build(cfg.nas_backbone)
    return nn.Sequential(backbone, DynamicLinear(backbone.last_mutable, cfg.model.architecture.head.num_classes))


def test_autoformer_trains_random_subnets_and_exports_the_chosen_widths():
    net = supernet()
    algo = build(load_config(CONFIG).model, architecture=net)
    assert isinstance(algo, Autoformer) and isinstance(net[0], AutoformerBackbone)
    space = algo.mutator.search_space()
    assert space["0.embed"] == [8, 16] and space["0.blocks"] == [1, 2]
    assert space["0.blocks.blocks.0.attn_width"] == [4, 8] and space["0.blocks.blocks.1.mlp_width"] == [16, 32]
    data = [(x / 255, y) for x, y in images(2, size=16)]
    paths = []
    fit(algo, data, loss=batch_loss, steps=4, lr=1e-3, seed=0, progress=False, num_threads=1,
        on_step=lambda step, loss: paths.append(tuple(algo.mutator.current_choices().values())))
    assert len(set(paths)) > 1
    subnet = {**algo.mutator.min_choices(), "0.blocks": 2, "0.blocks.blocks.1.attn_width": 8}
    small = export_subnet(algo, subnet)
    block = small[0].blocks[1]
    assert (block.q.in_features, block.q.out_features, block.fc1.out_features) == (8, 8, 16)
    assert small[0].patch_embed.out_channels == 8 and small[0].pos_embed.weight.shape == (1, 16, 8)
    assert small[1].in_features == 8 and count_parameters(small) < count_parameters(net) / 2
    algo.set_subnet(subnet)
    algo.eval()
    x = data[0][0]
    with torch.no_grad():
        assert torch.allclose(small.eval()(x), net(x), atol=1e-5)


@pytest.mark.slow
def test_autoformer_search_config_keeps_the_parameter_budget():
    cfg = load_config(CONFIG)
    algo = build(cfg.model, architecture=supernet())
    data = [(x / 255, y) for x, y in images(1, size=16, batch=8)]
    fit(algo, data, loss=batch_loss, steps=2, lr=1e-3, seed=0, progress=False, num_threads=1)
    result = build(cfg.train_cfg, model=algo, dataloader=data, progress=False).run()
    assert result.metrics["params"] <= 3000 and "accuracy/top1" in result.metrics


def test_autoformer_backbone_refuses_bad_arch_settings():
    with pytest.raises(ConfigError, match="arch_setting must be dict\\(mlp_ratios"):
        AutoformerBackbone(dict(num_heads=[1], depth=[1], embed_dims=[8]))
    with pytest.raises(ConfigError, match="integers >= 1"):
        AutoformerBackbone(dict(mlp_ratios=[1.0], num_heads=[0], depth=[1], embed_dims=[8]))
    with pytest.raises(ConfigError, match="multiple of patch_size"):
        AutoformerBackbone(dict(mlp_ratios=[1.0], num_heads=[1], depth=[1], embed_dims=[8]), img_size=18)
