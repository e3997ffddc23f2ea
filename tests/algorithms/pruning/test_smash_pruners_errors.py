"""Bad pruning configs surface from smash() with messages that name the real layers and the fix."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit import SmashConfig, smash, zoo
from slimkit.errors import ConfigError, DataError, MissingComponentError


class SpatialAttentionNet(nn.Module):
    """conv's channels feed a mean over the channel dim (CBAM-style), which the speedup cannot shrink."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.gate = nn.Conv2d(1, 1, 3, padding=1)
        self.mid = nn.Conv2d(8, 8, 1)
        self.out = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = y * torch.sigmoid(self.gate(y.mean(dim=1, keepdim=True)))
        return self.out(torch.relu(self.mid(y)))


@pytest.fixture(scope="module")
def digits():
    return zoo.load("digits_cnn")


def _cfg(algo: str, inputs=None, **hps) -> SmashConfig:
    cfg = SmashConfig({algo: hps}, device="cpu")
    if inputs is not None:
        cfg.add_example_inputs(inputs)
    return cfg


def test_unknown_op_name_lists_the_real_layers(digits):
    model, x = digits
    cfg = _cfg("l1_filter", x, config_list=[{"sparsity": 0.5}, {"exclude": True, "op_names": ["features.44"]}])
    with pytest.raises(ConfigError) as info:
        smash(model, cfg, verbose=False)
    text = str(info.value)
    assert "config_list[1] op_name 'features.44' is not a layer of this model" in text
    assert "Layer names (closest first): features.4, " in text and "from l1_filter_config_list" in text


def test_unknown_exclude_name_points_at_the_hyperparameters(digits):
    model, x = digits
    with pytest.raises(ConfigError, match=r"op_name 'classifer\.3' is not a layer.*closest first\): classifier\.3.*"
                                          r"from fpgm_sparsity/op_types/op_names/exclude"):
        smash(model, _cfg("fpgm", x, exclude=["classifer.3"]), verbose=False)


def test_config_list_values_are_checked(digits):
    model, x = digits
    with pytest.raises(ConfigError, match=r"config_list\[0\]\['sparsity'\] = 1\.5 is outside \[0, 1\)"):
        smash(model, _cfg("l2_filter", x, config_list=[{"sparsity": 1.5}]), verbose=False)
    with pytest.raises(ConfigError, match=r"op_type 'Conv9d' is not a torch\.nn class name.*Did you mean"):
        smash(model, _cfg("level", config_list=[{"sparsity": 0.5, "op_types": ["Conv9d"]}]), verbose=False)


@pytest.mark.parametrize("bad", [
    [{"sparsity": 0.5, "op_type": ["Conv2d"]}],  # unknown key
    [{"sparsity": "half"}],
    [{"sparsity": 0.5, "op_names": "conv1"}],  # a string, not a list
    [{"exclude": "yes", "op_names": ["fc"]}],
    {"sparsity": 0.5},  # a dict, not a list of dicts
])
def test_config_list_structure_is_checked_when_set(bad):
    cfg = SmashConfig(["l1_filter"])
    with pytest.raises(ConfigError, match=r"Invalid value .* for 'l1_filter_config_list': allowed is a list of dicts "
                                          r"with keys sparsity, sparsity_per_layer, op_types, op_names, exclude"):
        cfg["l1_filter_config_list"] = bad


def test_missing_dummy_input_says_how_to_give_one(digits):
    model, _ = digits
    with pytest.raises(ConfigError, match=r"l1_filter with l1_filter_speedup=True runs the model once.*"
                                          r"cfg\.add_example_inputs\(inputs\).*cfg\.add_data\(\.\.\.\).*"
                                          r"cfg\['l1_filter_speedup'\] = False"):
        smash(model, _cfg("l1_filter"), verbose=False)
    smashed = smash(model, _cfg("l1_filter", speedup=False), verbose=False)  # no speedup: no input needed
    assert smashed.model.features[4].weight.shape == (64, 32, 3, 3)
    assert int((smashed.model.features[4].weight.flatten(1).abs().sum(1) == 0).sum()) == 32


def test_unsupported_op_names_the_op_and_the_smashconfig_fix():
    torch.manual_seed(0)
    model, x = SpatialAttentionNet().eval(), torch.randn(2, 3, 8, 8)
    smashed = smash(model, _cfg("l1_filter", x), verbose=False)  # default: conv is left dense, mid is shrunk
    assert smashed.applied[0]["state"]["left_dense"] == ["conv", "out"]
    assert smashed.model.mid.out_channels == 4 and smashed.model.conv.out_channels == 8
    with pytest.raises(ConfigError) as info:
        smash(model, _cfg("l1_filter", x, op_names=["conv"]), verbose=False)
    text = str(info.value)
    assert "flow into `mean`" in text and "{'exclude': True, 'op_names': ['conv']}" in text
    assert "cfg['l1_filter_exclude'] = ['conv']" in text and "cfg['l1_filter_speedup'] = False" in text
    assert model.conv.out_channels == 8  # smash works on a copy


def test_nothing_left_to_prune_is_an_error():
    model, x = zoo.load("mlp")
    with pytest.raises(ConfigError, match=r"l1_filter: no layer is left to prune. The 'default' layers cannot be "
                                          r"shrunk:\n  \['fc3'\]: its channels reach the model output"):
        smash(model, _cfg("l1_filter", x, exclude=["fc1", "fc2"]), verbose=False)
    smashed = smash(model, _cfg("l1_filter", x, exclude=["fc2"]), verbose=False)  # fc1 alone can still shrink
    small = smashed.model
    assert (small.fc1.out_features, small.fc2.in_features, small.fc2.out_features) == (32, 32, 64)


def test_slim_global_scope_needs_one_sparsity(digits):
    model, x = digits
    config_list = [{"sparsity": 0.5}, {"sparsity": 0.3, "op_names": ["features.5"]}]
    with pytest.raises(ConfigError, match=r"scope='global' needs one sparsity .*\[0\.3, 0\.5\]"):
        smash(model, _cfg("slim", x, config_list=config_list), verbose=False)
    smashed = smash(model, _cfg("slim", x, config_list=config_list, scope="layer"), verbose=False)
    assert smashed.model.features[5].num_features == 64 - 19 and smashed.model.features[1].num_features == 16


def test_heads_need_attention_blocks(digits):
    model, x = digits
    with pytest.raises(ConfigError, match="l1_filter_heads=True, but the speedup found no attention block"):
        smash(model, _cfg("l1_filter", x, heads=True), verbose=False)


def test_data_pruners_need_data(digits):
    model, x = digits
    for algo in ("taylor_fo_weight", "activation_apoz_rank", "activation_mean_rank", "agp"):
        with pytest.raises(MissingComponentError, match=f"{algo} needs a dataset; add one with cfg.add_data"):
            smash(model, _cfg(algo, x), verbose=False)


def test_data_that_does_not_fit_the_model_is_a_data_error():
    model, x = zoo.load("resnet_tiny")  # 3-channel images; Digits are 1-channel 8x8
    cfg = _cfg("taylor_fo_weight", x)
    cfg.add_data("Digits")
    with pytest.raises(DataError, match=r"taylor_fo_weight: running the model on the train data failed "
                                        r"\(RuntimeError: .*3 channels.*add matching data with cfg\.add_data"):
        smash(model, cfg, verbose=False)
