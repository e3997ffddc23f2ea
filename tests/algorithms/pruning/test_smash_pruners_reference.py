"""The Auptimizer/NNI L1-filter example (a default sparsity, two layers at another, one excluded) through smash."""

from __future__ import annotations

import torch

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.evaluation import count_macs, count_parameters, size_on_disk

CONFIG_LIST = [
    {"sparsity": 0.5, "op_types": ["default"]},
    {"sparsity": 0.25, "op_names": ["features.4", "features.8"]},
    {"exclude": True, "op_names": ["features.0"]},
]


def _smash_digits():
    base, x = zoo.load("digits_cnn")
    cfg = SmashConfig({"l1_filter": {"config_list": CONFIG_LIST}}, device="cpu")
    cfg.add_example_inputs(x)
    return base, x, cfg, smash(base, cfg, verbose=False)


def test_reference_l1_filter_config_list(tmp_path):
    base, x, cfg, smashed = _smash_digits()
    model = smashed.model
    # excluded: the first conv and its BatchNorm are exactly the base ones
    assert torch.equal(model.features[0].weight, base.features[0].weight)
    assert torch.equal(model.features[1].weight, base.features[1].weight)
    # the two named layers lose 25% of their filters, the other default layer 50%, the output layer nothing
    assert model.features[4].out_channels == 48 and model.features[8].out_channels == 96
    assert model.features[4].in_channels == 32 and model.features[8].in_channels == 48
    assert model.classifier[1].out_features == 64 and model.classifier[1].in_features == 96 * 4
    assert (model.classifier[3].out_features, model.classifier[3].in_features) == (10, 64)
    state = smashed.applied[0]["state"]
    assert state["left_dense"] == ["classifier.3"] and state["pruned_layers"] == ["classifier.1", "features.4",
                                                                                    "features.8"]
    l1 = base.features[4].weight.abs().sum(dim=(1, 2, 3))  # no coupling here: the 48 largest-L1 filters stay
    assert state["kept_channels"]["features.4"]["out"] == sorted(l1.argsort()[16:].tolist())
    # smaller on disk, fewer parameters and MACs (by hand: 48/64 and 96/128 filters, 64/128 hidden units)
    assert size_on_disk(smashed) < 0.55 * size_on_disk(base)
    params = 288 + 64 + 48 * 32 * 9 + 96 + 96 * 48 * 9 + 192 + (384 * 64 + 64) + 650
    assert count_parameters(model) == params
    per_image = 32 * 9 * 64 + 48 * 32 * 9 * 16 + 96 * 48 * 9 * 4 + 384 * 64 + 64 * 10
    assert count_macs(model, x) == len(x) * per_image < 0.65 * count_macs(base, x)

    smashed.save_pretrained(tmp_path / "small")
    again = SmashedModel.from_pretrained(tmp_path / "small")  # no model=: rebuilt from the zoo name
    with torch.no_grad():
        assert torch.equal(again(x), smashed(x))
    assert again.smash_config["l1_filter_config_list"] == tuple(CONFIG_LIST)


def test_config_list_round_trips_through_json(tmp_path):
    cfg = SmashConfig(device="cpu")
    cfg["pruner"] = "fpgm"
    cfg["fpgm_config_list"] = CONFIG_LIST
    assert cfg["fpgm_config_list"] == tuple(CONFIG_LIST)
    cfg.save_to_json(tmp_path)
    again = SmashConfig.from_json(tmp_path)
    assert again == cfg and again["fpgm_config_list"] == tuple(CONFIG_LIST)
    assert again.to_dict()["hyperparameters"]["fpgm_config_list"] == CONFIG_LIST


def test_dependency_aware_residual_groups_share_channels():
    base, x = zoo.load("resnet_tiny")
    cfg = SmashConfig({"l2_filter": {"sparsity": 0.25}}, device="cpu")
    cfg.add_example_inputs(x)
    smashed = smash(base, cfg, verbose=False)
    kept = smashed.applied[0]["state"]["kept_channels"]
    # conv2 and the downsample conv are added together: one decision for both, from their summed norms
    w2, wd = base.layer2[0].conv2.weight.flatten(1), base.layer2[0].downsample[0].weight.flatten(1)
    score = w2.norm(dim=1) / w2.norm(dim=1).mean() + wd.norm(dim=1) / wd.norm(dim=1).mean()
    assert kept["layer2.0.conv2"]["out"] == kept["layer2.0.downsample.0"]["out"] == sorted(score.argsort()[8:].tolist())
    assert smashed.applied[0]["state"]["speedup_warnings"] == []
