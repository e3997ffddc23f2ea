"""MMRazor's pruned-model builders from our own configs: ``GroupFisherDeploySubModel`` (a pruning structure on a
fresh network, rounded to ``divisor``), ``sub_model`` with ``mode='mutator'`` (a channel mutator's dump, e.g. DMCP's
subnet files; a count above a unit's width keeps the whole unit with a warning, as MMRazor) and
``GroupFisherSubModel``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from slimkit.errors import ConfigError
from slimkit.evaluation import count_parameters
from slimkit.razor import build, load_config
from slimkit.training import fit
from tests.faces.mmrazor.mm_models import images, out_channels, tiny_resnet

PRUNING = Path(__file__).parent / "configs" / "pruning"
X16 = images(4, size=16)


# --- deploy sub-models (MMRazor's *_deploy / *_finetune / mode='mutator' subnet configs) ----------------------
def test_deploy_sub_model_config_shrinks_a_fresh_network_to_the_structure_rounded_to_the_divisor():
    cfg = load_config(PRUNING / "group_fisher_deploy_resnet18_tiny.py")
    net = tiny_resnet()
    before = count_parameters(net)
    small = build(cfg.model, architecture=net, dummy_input=X16[0][0][:1])
    assert out_channels(small, "backbone.conv1") == 8  # 5 rounded up to 8 (the unit's width)
    assert out_channels(small, "backbone.layer1.0.conv1") == 4 and out_channels(small, "backbone.layer2.0.conv1") == 12
    assert out_channels(small, "backbone.layer3.1.conv1") == 8 and out_channels(small, "backbone.layer4.0.conv1") == 64
    assert count_parameters(small) < before and small.kept_channels["backbone.layer1.0.conv1"]["out"] == [0, 1, 2, 3]
    assert small(X16[0][0]).shape == (4, 10)
    with pytest.raises(ConfigError, match="divisor must be an int >= 1"):
        build(cfg.model, architecture=tiny_resnet(), divisor=0)

@pytest.mark.parametrize("choice, message", [
    (0, r"a kept ratio in \(0, 1\] or a channel count >= 1, got 0"), (-3, "channel count >= 1, got -3"),
    ("8", "channel count >= 1, got '8'"), (2.5, r"has 8 channels; cannot keep 2.5")])
def test_deploy_sub_model_refuses_counts_that_are_not_positive_ints(choice, message):
    cfg = load_config(PRUNING / "group_fisher_deploy_resnet18_tiny.py")
    with pytest.raises(ConfigError, match=message):
        build(cfg.model, architecture=tiny_resnet(), fix_subnet={"backbone.layer1.0.conv1_(0, 8)_8": choice},
              dummy_input=X16[0][0][:1])


def test_dmcp_subnet_config_clamps_a_count_above_the_unit_width_with_one_warning(caplog):
    cfg = load_config(PRUNING / "dmcp_resnet18_tiny_subnet.py")
    with caplog.at_level("WARNING", logger="slimkit.faces.mmrazor.pruning.deploy"):
        small = build(cfg.model, architecture=tiny_resnet())
    warned = [r.getMessage() for r in caplog.records if r.name == "slimkit.faces.mmrazor.pruning.deploy"]
    assert warned == ["Pruning structure asks unit backbone.layer2.0.conv1_(0, 16)_16 for 20 channels; it has 16: "
                      "keeping all 16 (as MMRazor does)."]
    widths = [out_channels(small, f"backbone.{n}") for n in ("conv1", "layer1.0.conv1", "layer2.0.conv1",
                                                             "layer4.1.conv1")]
    assert widths == [6, 4, 16, 48]  # 20 of 16 -> 16; the other units as the dump says
    assert count_parameters(small) < count_parameters(tiny_resnet())
    before = small.backbone.layer2[0].conv1.weight.detach().clone()
    fit(small, X16[:1], steps=1, lr=1e-2, seed=0, progress=False, num_threads=1)
    assert not torch.equal(before, small.backbone.layer2[0].conv1.weight) and small(X16[0][0]).shape == (4, 10)


def test_sub_model_mode_mutator_reads_a_channel_mutator_dump_and_ignores_the_algorithm_keys(tmp_path):
    dump = {"type": "DMCPChannelMutator", "channel_unit_cfg": {"type": "DMCPChannelUnit", "units": {
        "backbone.layer1.1.conv1_(0, 8)_8": {"init_args": {"num_channels": 8}, "choice": 3},
        "backbone.layer4.1.conv1_(0, 64)_64": {"init_args": {"num_channels": 64}, "choice": 0.5}}}}
    path = tmp_path / "DMCP_tiny.json"
    path.write_text(json.dumps(dump))
    small = build(dict(type="mmrazor.sub_model", cfg=dict(cfg_path="mmcls::resnet/resnet18.py"), fix_subnet=str(path),
                       mode="mutator", distiller=dict(type="ConfigurableDistiller"), arch_start_train=10),
                  architecture=tiny_resnet(), dummy_input=X16[0][0][:1])
    assert out_channels(small, "backbone.layer1.1.conv1") == 3 and out_channels(small, "backbone.layer4.1.conv1") == 32
    assert small(X16[0][0]).shape == (4, 10)
    path.write_text(json.dumps({"backbone.layer1.1.conv1": {"chosen": 3}}))
    with pytest.raises(ConfigError, match="mode='mutator' subnet is a channel mutator's dump"):
        build(dict(type="sub_model", fix_subnet=str(path), mode="mutator"), architecture=tiny_resnet())


def test_group_fisher_sub_model_deploys_the_algorithm_it_builds():
    algo = dict(type="GroupFisherAlgorithm", interval=1, mutator=dict(type="GroupFisherChannelMutator", parse_cfg=dict(
        type="ChannelAnalyzer", demo_input=(1, 3, 16, 16))))
    net = tiny_resnet()
    static = build(dict(type="GroupFisherSubModel", algorithm=algo, divisor=4), architecture=net)
    assert static is net and count_parameters(static) == count_parameters(tiny_resnet())  # nothing pruned yet
    with pytest.raises(ConfigError, match="GroupFisherSubModel needs a pruning algorithm"):
        build(dict(type="GroupFisherSubModel", algorithm=dict(type="KLDivergence")))
