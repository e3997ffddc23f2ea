"""make_searchable: a plain CNN becomes a width supernet that computes what it did; subnets export exactly."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from slimkit import zoo
from slimkit.engines.nas import DynamicConv2d, DynamicLinear, NasMutator, export_subnet
from slimkit.engines.nas.searchable import (
    find_width_groups,
    layer_shapes,
    make_searchable,
    resize_layers,
    width_choices,
)
from slimkit.errors import ConfigError


@pytest.fixture(scope="module")
def digits():
    return zoo.load("digits_cnn").model.eval(), torch.rand(16, 1, 8, 8, generator=torch.Generator().manual_seed(0))


def test_digits_cnn_groups_widths_and_sorted_channels(digits):
    model, x = digits
    groups, skipped = find_width_groups(model, x[:1])
    assert [(g.name, g.producers, g.norms, g.readers) for g in groups] == [
        ("features_0", ["features.0"], ["features.1"], {"features.4": 1}),
        ("features_4", ["features.4"], ["features.5"], {"features.8": 1}),
        ("features_8", ["features.8"], ["features.9"], {"classifier.1": 4}),  # Flatten of 128 x 2 x 2
        ("classifier_1", ["classifier.1"], [], {"classifier.3": 1})]
    assert skipped == {"classifier.3": "its channels reach the model output or an op the speedup cannot shrink"}
    supernet = make_searchable(copy.deepcopy(model), x[:1]).eval()
    assert NasMutator(supernet).search_space()["widths.features_8"] == [32, 64, 96, 128]
    assert isinstance(supernet.model.features[4], DynamicConv2d)
    assert isinstance(supernet.model.classifier[1], DynamicLinear) and supernet.model.classifier[1].in_factor == 4
    with torch.no_grad():  # widest subnet == the original model (channels only reordered)
        torch.testing.assert_close(supernet(x), model(x), atol=1e-5, rtol=1e-5)
    l1 = supernet.model.features[0].weight.detach().abs().flatten(1).sum(1)
    assert torch.all(l1[:-1] >= l1[1:])  # strongest filters first, so width k keeps the k strongest


def test_a_subnet_exports_to_plain_layers_that_compute_the_same(digits):
    model, x = digits
    supernet = make_searchable(copy.deepcopy(model), x[:1]).eval()
    NasMutator(supernet).set_choices({"widths.features_0": 8, "widths.features_4": 32, "widths.features_8": 64,
                                      "widths.classifier_1": 96})
    small = export_subnet(supernet).model
    assert [type(m) for m in small.modules() if "Dynamic" in type(m).__name__] == []
    assert layer_shapes(small)["classifier.1"] == [256, 96] and layer_shapes(small)["features.4"] == [8, 32]
    with torch.no_grad():
        torch.testing.assert_close(small(x), supernet(x), atol=1e-6, rtol=1e-6)
    rebuilt = resize_layers(zoo.build("digits_cnn"), layer_shapes(small))  # the replay of a saved subnet
    rebuilt.load_state_dict(small.state_dict(), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.eval()(x), small(x), atol=0, rtol=0)


def test_residual_groups_share_one_width():
    model, x = zoo.build("resnet_tiny").eval(), torch.rand(2, 3, 32, 32)
    groups, _ = find_width_groups(model, x[:1])
    stem = next(g for g in groups if g.name == "conv1")
    assert stem.producers == ["conv1", "layer1.0.conv2"] and stem.norms == ["bn1", "layer1.0.bn2"]
    supernet = make_searchable(copy.deepcopy(model), x[:1]).eval()
    with torch.no_grad():
        torch.testing.assert_close(supernet(x), model(x), atol=1e-5, rtol=1e-5)
        mutator = NasMutator(supernet)
        mutator.set_choices({n: c[0] for n, c in mutator.search_space().items()})  # the narrowest subnet
        small = export_subnet(supernet).model
        torch.testing.assert_close(small(x), supernet(x), atol=1e-5, rtol=1e-5)
    assert small.conv1.out_channels == small.layer1[0].conv2.out_channels == width_choices(stem.channels, [0.25])[0]


def test_depthwise_groups_keep_their_width():
    model = zoo.build("mobilenet_v2").eval()
    _, skipped = find_width_groups(model, torch.rand(1, 3, 64, 64))
    assert skipped["features.0.0"] == "features.1.conv.0.0 reads them and is a depthwise op"


@pytest.mark.parametrize(("model", "reason"), [
    (nn.Sequential(nn.Flatten(), nn.Linear(16, 2)), "reach the model output"),
    (nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.LayerNorm(8), nn.Linear(8, 2)), "is a LayerNorm"),
])
def test_a_model_without_a_searchable_group_is_refused_with_the_supported_shapes(model, reason):
    with pytest.raises(ConfigError) as err:
        make_searchable(model, torch.rand(1, 1, 4, 4))
    assert reason in str(err.value) and "Supported: CNNs whose channels flow through plain nn.Conv2d" in str(err.value)


def test_width_choices():
    assert width_choices(32, [0.25, 0.5]) == [8, 16, 32]  # the full width is always a choice
    assert width_choices(3, [0.1]) == [1, 3]
    with pytest.raises(ConfigError, match=r"in \(0, 1\]"):
        width_choices(8, [0.0, 1.5])
