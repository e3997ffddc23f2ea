from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.engines.speedup import ModelSpeedup, SpeedupError, UnsupportedOpError, apply_kept_channels
from slimkit.errors import ConfigError, SlimkitError
from tests.engines.speedup.speedup_models import FlattenNet, ResNetTiny, param_count, row_mask, run_speedup, seeded


class ChunkNet(nn.Module):
    """Splits the channels of features.3.conv in two halves by position (a gated unit)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.ModuleDict({"3": nn.ModuleDict({"conv": nn.Conv2d(3, 8, 3, padding=1)})})
        self.head = nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.features["3"]["conv"](x).chunk(2, dim=1)
        return self.head(a * torch.sigmoid(b))


class SpatialAttentionNet(nn.Module):
    """CBAM-style spatial attention: a mean over the channel dim."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.gate = nn.Conv2d(1, 1, 3, padding=1)
        self.out = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return self.out(y * torch.sigmoid(self.gate(y.mean(dim=1, keepdim=True))))


class ModuleNet(nn.Module):
    """conv -> a module the speedup does not know (PReLU, own per-channel weight) or a grouped conv."""

    def __init__(self, middle: nn.Module) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.middle = middle
        self.out = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.middle(self.conv(x)))


class HardCodedView(nn.Module):
    """LeNet-style x.view(-1, 8 * 3 * 3): silently wrong or crashing once the conv shrinks."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 3 * 3, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.max_pool2d(torch.relu(self.conv(x)), 2).view(-1, 8 * 3 * 3))


X = torch.randn(2, 3, 6, 6)


def half(module: nn.Module) -> dict:
    return row_mask(module, list(range(module.weight.shape[0] // 2)))


def test_chunk_ties_channel_i_of_every_part(tmp_path):
    model = ChunkNet().eval()  # the two halves of the chunk are paired: channel i goes with channel i + 4
    conv = model.features["3"]["conv"]
    small, speedup = run_speedup(model, X, {"features.3.conv": row_mask(conv, [0, 1, 4, 5])})
    assert speedup.kept_channels["features.3.conv"]["out"] == [0, 1, 4, 5]
    assert small.head.in_channels == 2
    fresh = ChunkNet().eval()
    with pytest.warns(UserWarning, match=r"mask removes 4 of 8 output channels; 0 removed"):
        _, speedup = run_speedup(fresh, X, {"features.3.conv": row_mask(fresh.features["3"]["conv"], [0, 1, 2, 3])})
    assert speedup.kept_channels == {}


class SliceNet(nn.Module):
    """Takes the first 3 channels of conv by a fixed offset."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x)[:, :3])


def test_fixed_offset_slice_names_op_layer_and_exclude_entry():
    model = SliceNet().eval()
    with pytest.raises(UnsupportedOpError) as info:
        ModelSpeedup(model, X, {"conv": half(model.conv)}).speedup_model()
    err = info.value
    assert isinstance(err, SlimkitError) and err.op == "__getitem__" and err.layers == ["conv"]
    assert "{'exclude': True, 'op_names': ['conv']}" in str(err)
    assert "flow into `__getitem__`" in str(err) and "selects channels by position" in str(err)
    assert model.conv.out_channels == 8  # nothing was changed


def test_unpruned_unsupported_ops_are_fine():
    model = ChunkNet().eval()
    _, speedup = run_speedup(model, X, {"head": row_mask(model.head, [0, 1, 2, 3])})
    assert speedup.kept_channels == {}


def test_mean_over_channels_is_refused():
    model = SpatialAttentionNet().eval()
    with pytest.raises(UnsupportedOpError, match=r"flow into `mean` at '<model>'.*depends on how many channels"):
        ModelSpeedup(model, X, {"conv": half(model.conv)}).speedup_model()


class Scaled(nn.Module):
    """A module of our own with a per-channel parameter used through a function the speedup does not know."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.rand(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("nchw,c->nchw", x, self.scale)


def test_unknown_function_in_a_module_with_parameters_is_refused():
    model = ModuleNet(Scaled()).eval()
    with pytest.raises(UnsupportedOpError) as info:
        ModelSpeedup(model, X, {"conv": half(model.conv)}).speedup_model()
    assert info.value.op == "einsum" and info.value.location == "middle"
    assert info.value.exclude == {"exclude": True, "op_names": ["conv"]}


@pytest.mark.parametrize("middle", [nn.PReLU(8), Scaled(), nn.Conv2d(8, 8, 3, padding=1, groups=2)])
def test_per_channel_parameters_and_grouped_convs_shrink(middle, tmp_path):
    if isinstance(middle, Scaled):
        middle.forward = lambda x: x * middle.scale.view(-1, 1, 1)  # a layer scale on NCHW channels
    model = ModuleNet(middle).eval()
    with torch.no_grad():
        model.conv.weight[4:] = 0  # the mask's zeros, so the masked model is the reference
        model.conv.bias[4:] = 0
        ref = model(X)
    small, speedup = run_speedup(model, X, {"conv": half(model.conv)})
    assert speedup.kept_channels["conv"]["out"] == [0, 1, 2, 3] and small.out.in_channels == 4
    with torch.no_grad():
        torch.testing.assert_close(small(X), ref)
    if isinstance(middle, nn.Conv2d):  # the first of its two groups stays whole
        assert (small.middle.groups, small.middle.in_channels, small.middle.out_channels) == (1, 4, 4)
    else:
        assert next(iter(small.middle.parameters())).shape == (4,)


def test_a_layer_inside_a_module_with_a_scalar_parameter_is_pruned():
    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(1))
            self.inner = nn.Conv2d(3, 8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x) * self.scale

    model = nn.Sequential(Wrapper(), nn.Conv2d(8, 2, 1)).eval()
    small, _ = run_speedup(model, X, {"0.inner": half(model[0].inner)})
    assert small[0].inner.out_channels == 4 and small[1].in_channels == 4


def test_unknown_mask_name_suggests_real_layers():
    model = seeded(ResNetTiny)
    with pytest.raises(ConfigError, match=r"Mask for layer 'l1.cl'.*Did you mean .*'l1.c1'"):
        ModelSpeedup(model, X, {"l1.cl": half(model.l1.c1)})


def test_mask_shape_and_content_are_checked():
    model = seeded(ResNetTiny)
    with pytest.raises(ConfigError, match=r"weight_mask for 'l1.c1' has shape \(8, 16, 3, 3\); the layer's weight has "
                                          r"shape \(16, 16, 3, 3\)"):
        ModelSpeedup(model, X, {"l1.c1": {"weight_mask": torch.ones(8, 16, 3, 3)}})
    with pytest.raises(ConfigError, match=r"out_channels for 'l1.c1' must be indices in \[0, 16\); got values from 3 "
                                          r"to 40"):
        ModelSpeedup(model, X, {"l1.c1": {"out_channels": torch.tensor([3, 40])}})
    with pytest.raises(ConfigError, match="neither 'weight_mask' nor 'out_channels'"):
        ModelSpeedup(model, X, {"l1.c1": {"mask": 1}})
    with pytest.raises(ConfigError, match="does not exist"):
        ModelSpeedup(model, X, "/nonexistent/masks.pth")


def test_channel_index_masks_and_mask_files(tmp_path):
    model = seeded(ResNetTiny)
    path = tmp_path / "mask.pth"
    torch.save({"l1.c1": {"weight": half(model.l1.c1)["weight_mask"], "bias": None}}, path)  # NNI file keys
    _, speedup = run_speedup(model, X, path)
    assert speedup.kept_channels["l1.c1"]["out"] == list(range(8))
    model = seeded(ResNetTiny)
    _, speedup = run_speedup(model, X, {"l1.c1": {"out_channels": torch.tensor([5, 1, 9])}})
    assert speedup.kept_channels["l1.c2"]["in"] == [1, 5, 9] and model.l1.c2.in_channels == 3


def test_hard_coded_view_fails_loudly_and_leaves_the_model_unchanged():
    torch.manual_seed(0)
    model = HardCodedView().eval()
    x = torch.randn(3, 1, 6, 6)
    with torch.no_grad():
        before = model(x)
    params = param_count(model)
    with pytest.raises(SpeedupError, match=r"no longer runs on dummy_input.*x.view\(-1, 400\).*left unchanged"):
        ModelSpeedup(model, x, {"conv": half(model.conv)}).speedup_model()
    assert param_count(model) == params and model.conv.out_channels == 8
    with torch.no_grad():
        assert torch.equal(model(x), before)


def test_pruning_the_model_output_only_warns():
    model = seeded(FlattenNet)
    with pytest.warns(UserWarning, match=r"fc2: mask removes 5 of 10 output channels; 0 removed \(they reach the "
                                         r"model output"):
        _, speedup = run_speedup(model, torch.randn(1, 1, 6, 6), {"fc2": half(model.fc2)})
    assert speedup.kept_channels == {} and model.fc2.out_features == 10


def test_pruning_every_channel_keeps_one():
    model = seeded(FlattenNet)
    with pytest.warns(UserWarning) as record:
        _, speedup = run_speedup(model, torch.randn(1, 1, 6, 6), {"conv": row_mask(model.conv, [])})
    assert [str(w.message) for w in record] == [
        "conv: every channel was pruned; keeping channel 0 so the layer still works.",
        "conv: mask removes 8 of 8 output channels; 7 removed (a layer keeps at least one channel).",
    ]
    assert speedup.kept_channels["conv"]["out"] == [0] and model.fc1.in_features == 9


def test_bad_kept_channel_records_are_refused_and_change_nothing():
    model = seeded(ResNetTiny)
    with pytest.raises(SpeedupError, match=r"kept_channels\['l1.c2'\]\['in'\] must hold 1 to 16 distinct indices.*"
                                           r"different base model"):
        apply_kept_channels(model, {"l1.c1": {"out": [0, 1], "in": list(range(16))},
                                    "l1.c2": {"out": list(range(16)), "in": [0, 99]}})
    assert model.l1.c1.out_channels == 16 and model.l1.c1.weight.shape[0] == 16
    with pytest.raises(SpeedupError, match=r"names layer 'l9', which the model does not have"):
        apply_kept_channels(model, {"l9": {"out": [0], "in": [0]}})
    with pytest.raises(SpeedupError, match=r"must be \{'out': \[...\], 'in': \[...\]\}"):
        apply_kept_channels(model, {"l1.c1": [0, 1]})
    with pytest.raises(SpeedupError, match="only Conv, ConvTranspose, Linear, Embedding, norm layers"):
        apply_kept_channels(model, {"pool": {"out": [0], "in": [0]}})


def test_a_broken_forward_is_reported():
    model = seeded(ResNetTiny)
    with pytest.raises(SpeedupError, match="Running the model on dummy_input failed while tracing"):
        ModelSpeedup(model, torch.randn(1, 5, 8, 8), {}).speedup_model()


def test_tied_weights_are_refused():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.b = nn.Linear(8, 8)
            self.b.weight = self.a.weight
            self.out = nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.b(torch.relu(self.a(x))))

    model = Tied().eval()  # b reads a's channels with the weight a applies to the input: they stay
    with pytest.raises(UnsupportedOpError, match=r"`shared weight` at 'b'.*shares a weight with \['a'\]"):
        ModelSpeedup(model, torch.randn(2, 8), {"a": half(model.a), "b": half(model.b)}).speedup_model()


def test_a_model_still_wrapped_by_a_pruner_is_refused():
    class Wrapper(nn.Module):  # what a pruner puts around a layer: the layer as .module, masks as buffers
        def __init__(self, module: nn.Module) -> None:
            super().__init__()
            self.module = module
            self.register_buffer("weight_mask", torch.ones_like(module.weight))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.module(x)

    model = nn.Sequential(Wrapper(nn.Conv2d(3, 4, 1)), nn.Conv2d(4, 2, 1))
    with pytest.raises(ConfigError, match=r"Layer '0' is still wrapped by a pruner \(Wrapper\).*unwrap_model"):
        ModelSpeedup(model, X, {"0": {"weight_mask": torch.ones(4, 3, 1, 1)}})


def test_plan_changes_nothing_and_speedup_runs_once():
    model = seeded(ResNetTiny)
    speedup = ModelSpeedup(model, X, {"l1.c1": half(model.l1.c1)})
    assert speedup.plan()["l1.c2"]["in"] == list(range(8)) and model.l1.c1.out_channels == 16
    speedup.speedup_model()
    assert model.l1.c1.out_channels == 8
    with pytest.raises(SpeedupError, match=r"speedup_model\(\) already ran"):
        speedup.speedup_model()
