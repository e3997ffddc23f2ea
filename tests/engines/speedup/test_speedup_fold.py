"""Folding the constants of removed channels (BatchNorm shift, bias) into the layers that read them."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors.torch import load_model, save_model
from torch import nn

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.engines.pruning import L1FilterPruner
from slimkit.engines.speedup import ModelSpeedup, apply_kept_channels
from tests.engines.speedup.speedup_models import masked_reference, row_mask


def trained_bn(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial BN statistics and affine parameters, as after training (the shift is what gets folded)."""
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=gen))
            m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=gen) + 0.5)
            m.bias.data.copy_(torch.randn(n, generator=gen))
    return model.eval()


class ConvBNLinear(nn.Module):
    """Conv -> BN -> ReLU -> MaxPool -> Flatten -> Linear: the Linear reads the pruned channels' shift."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2), 1))


class ConvBNConv(nn.Module):
    """Conv -> BN -> ReLU -> Conv -> BN -> ReLU -> mean -> Linear; ``feature`` keeps the second BN's output."""

    def __init__(self, kernel: int = 3, padding: int = 0, padding_mode: str = "zeros", bn2: bool = True) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 6, kernel, padding=padding, padding_mode=padding_mode, bias=False)
        self.bn2 = nn.BatchNorm2d(6) if bn2 else nn.Identity()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        self.feature = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return self.fc(torch.relu(self.feature).mean((2, 3)))


def prune_conv1(model: nn.Module, x: torch.Tensor, layer: str = "conv1", **options):
    """L1-prune half the filters of ``layer``; returns (masked output, folded small model, its speedup, plain output).

    The masked model's ``feature`` (when it keeps one) is left on it as ``masked_feature``.
    """
    plain_model = copy.deepcopy(model)
    pruner = L1FilterPruner(model, [{"sparsity": 0.5, "op_names": [layer]}])
    pruner.compress()
    masks = pruner.get_masks()
    with torch.no_grad():
        masked = model(x)
    model.masked_feature = getattr(model, "feature", torch.empty(0)).clone()
    model = pruner.unwrap_model(apply_masks=True)
    plain = ModelSpeedup(plain_model, x, masks, fold_constants=False).speedup_model()
    speedup = ModelSpeedup(model, x, masks, **options)
    small = speedup.speedup_model()
    with torch.no_grad():
        return masked, small, speedup, plain(x)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def positive_shifts(bn: nn.BatchNorm2d, kept: list[int]) -> int:
    """Removed channels whose BN shift survives ReLU (the others carry 0: nothing to fold)."""
    shift = bn.bias - bn.running_mean * bn.weight / torch.sqrt(bn.running_var + bn.eps)
    return sum(1 for c in range(bn.num_features) if c not in kept and shift[c] > 0)


def test_linear_after_bn_relu_pool_flatten_is_exact():
    torch.manual_seed(0)
    model, x = trained_bn(ConvBNLinear()), torch.randn(4, 3, 8, 8)
    bn = copy.deepcopy(model.bn)
    masked, small, speedup, plain = prune_conv1(model, x, "conv")
    with torch.no_grad():
        after = max_diff(small(x), masked)
    assert max_diff(plain, masked) > 0.1 and after < 1e-5  # dropping the shifted channels vs folding them
    [fold] = speedup.folds
    live = positive_shifts(bn, speedup.kept_channels["conv"]["out"])
    assert (fold.layer, fold.target, fold.exact, fold.unfolded) == ("fc", "bias", True, 0)
    assert fold.channels == 16 * live > 0  # every pooled position of every live removed channel
    assert small.fc.in_features == 64 and "add_bias" not in speedup.kept_channels["fc"]


@pytest.mark.parametrize(("kernel", "padding", "mode"), [(3, 0, "zeros"), (1, 0, "zeros"), (3, 1, "replicate")])
def test_conv_without_zero_padding_folds_exactly_into_the_next_norm(kernel, padding, mode):
    torch.manual_seed(0)
    model, x = trained_bn(ConvBNConv(kernel, padding, mode)), torch.randn(2, 3, 8, 8)
    bn1, bn2_mean = copy.deepcopy(model.bn1), model.bn2.running_mean.clone()
    masked, small, speedup, plain = prune_conv1(model, x)
    with torch.no_grad():
        after = max_diff(small(x), masked)
    assert max_diff(plain, masked) > 0.01 and after < 1e-5
    [fold] = speedup.folds
    assert (fold.layer, fold.target, fold.exact) == ("conv2", "bn2", True)
    assert fold.channels == positive_shifts(bn1, speedup.kept_channels["conv1"]["out"]) > 0
    assert small.conv2.bias is None  # shifted the norm's running mean instead of adding a bias
    torch.testing.assert_close(small.bn2.running_mean, bn2_mean - fold.delta.float())


def test_zero_padded_conv_is_exact_inside_and_closer_at_the_border():
    torch.manual_seed(0)
    model, x = trained_bn(ConvBNConv(3, 1)), torch.randn(2, 3, 8, 8)
    masked, small, speedup, plain = prune_conv1(model, x)
    masked_feature = model.masked_feature
    with torch.no_grad():
        out = small(x)
    assert max_diff(out, masked) < 0.5 * max_diff(plain, masked)
    assert not speedup.folds[0].exact
    inner = (slice(None), slice(None), slice(1, -1), slice(1, -1))
    torch.testing.assert_close(small.feature[inner], masked_feature[inner], atol=1e-5, rtol=1e-5)
    assert max_diff(small.feature, masked_feature) > 1e-3  # the border taps on the padding saw 0, not the shift


def test_a_layer_without_bias_or_norm_gets_a_bias_that_replays(tmp_path):
    torch.manual_seed(0)
    model, x = trained_bn(ConvBNConv(1, 0, bn2=False)), torch.randn(2, 3, 8, 8)
    masked, small, speedup, _ = prune_conv1(model, x)
    with torch.no_grad():
        assert max_diff(small(x), masked) < 1e-5
    assert speedup.folds[0].target == "new bias" and speedup.kept_channels["conv2"]["add_bias"] is True
    assert small.conv2.bias.shape == (6,)
    save_model(small, str(tmp_path / "small.safetensors"))
    torch.manual_seed(1)
    fresh = ConvBNConv(1, 0, bn2=False).eval()
    apply_kept_channels(fresh, json.loads(json.dumps(speedup.kept_channels)))
    load_model(fresh, str(tmp_path / "small.safetensors"), strict=True)
    with torch.no_grad():
        assert torch.equal(fresh(x), small(x))


class Gated(nn.Module):
    """Conv -> BN -> ReLU, times a per-pixel gate computed from the input: the pruned channels depend on data."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.gate = nn.Conv2d(3, 1, 1)
        self.conv2 = nn.Conv2d(8, 4, 1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x))) * torch.sigmoid(self.gate(x))
        return self.fc(self.conv2(y).mean((2, 3)))


def test_data_dependent_channels_are_not_folded():
    torch.manual_seed(0)
    model, x = trained_bn(Gated()), torch.randn(2, 3, 8, 8)
    _, small, speedup, plain = prune_conv1(model, x)
    [fold] = speedup.folds
    assert fold.channels == 0 and fold.unfolded > 0  # const * gate(x): nothing data-free to fold
    with torch.no_grad():
        assert torch.equal(small(x), plain)


def test_out_channel_masks_keep_their_data_dependent_channels_unfolded():
    torch.manual_seed(0)
    model, x = trained_bn(ConvBNConv(1, 0)), torch.randn(2, 3, 8, 8)
    plain = copy.deepcopy(model)
    masks = {"conv1": {"out_channels": torch.tensor([0, 2, 4, 6])}}  # rows 1, 3, 5, 7 removed, not zeroed
    speedup = ModelSpeedup(model, x, masks)
    speedup.speedup_model()
    ModelSpeedup(plain, x, masks, fold_constants=False).speedup_model()
    [fold] = speedup.folds
    assert fold.layer == "conv2" and fold.channels == 0 and fold.unfolded > 0
    with torch.no_grad():
        assert torch.equal(model(x), plain(x))


def test_digits_cnn_masked_vs_shrunk_before_and_after_folding():
    model, x = zoo.load("digits_cnn")
    trained_bn(model)
    masks_model = copy.deepcopy(model)
    pruner = L1FilterPruner(masks_model, [{"sparsity": 0.5, "op_types": ["Conv2d", "Linear"]},
                                          {"exclude": True, "op_names": ["classifier.3"]}])
    pruner.compress()
    masks = pruner.get_masks()
    with torch.no_grad():
        masked = masked_reference(model, masks)(x)
        plain = ModelSpeedup(copy.deepcopy(model), x, masks, fold_constants=False).speedup_model()(x)
        speedup = ModelSpeedup(copy.deepcopy(model), x, masks)
        folded = speedup.speedup_model()(x)
    before, after = max_diff(plain, masked), max_diff(folded, masked)
    assert before > 1.0 and after < 0.5 * before  # 3x3 convs on 4x4 and 2x2 maps: mostly border positions
    assert [(f.layer, f.target, f.exact) for f in speedup.folds] == [
        ("features.4", "features.5", False), ("features.8", "features.9", False), ("classifier.1", "bias", True)]


def test_digits_cnn_last_conv_into_the_classifier_is_exact():
    model, x = zoo.load("digits_cnn")
    trained_bn(model, seed=1)
    masks_model = copy.deepcopy(model)
    pruner = L1FilterPruner(masks_model, [{"sparsity": 0.5, "op_names": ["features.8"]}])
    pruner.compress()
    masks = pruner.get_masks()
    with torch.no_grad():
        masked = masked_reference(model, masks)(x)
        plain = ModelSpeedup(copy.deepcopy(model), x, masks, fold_constants=False).speedup_model()(x)
        folded = ModelSpeedup(model, x, masks).speedup_model()(x)
    assert max_diff(plain, masked) > 1.0 and max_diff(folded, masked) < 1e-4


def test_smash_folds_and_the_added_bias_survives_save_and_load(tmp_path):
    torch.manual_seed(0)
    model, x = trained_bn(ConvBNConv(1, 0, bn2=False)), torch.randn(2, 3, 8, 8)
    cfg = SmashConfig({"l1_filter": {"sparsity": 0.5, "op_names": ["conv1"]}}, device="cpu")
    cfg.add_example_inputs(x)
    smashed = smash(model, cfg, verbose=False)
    kept = smashed.applied[0]["state"]["kept_channels"]
    assert kept["conv2"]["add_bias"] is True and smashed.model.conv1.out_channels == 4
    masks = {"conv1": row_mask(model.conv1, kept["conv1"]["out"])}
    with torch.no_grad():
        assert max_diff(smashed(x), masked_reference(model, masks)(x)) < 1e-5
    smashed.save_pretrained(tmp_path / "small")
    again = SmashedModel.from_pretrained(tmp_path / "small", model=lambda: ConvBNConv(1, 0, bn2=False))
    with torch.no_grad():
        assert torch.equal(again(x), smashed(x))
