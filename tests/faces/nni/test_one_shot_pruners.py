"""NNI 2.x's one-shot pruners as a user calls them: L1/L2 norm, FPGM and level pruning on a pre-trained CNN.

The flow is NNI's: ``pruner = XPruner(model, config_list)``, ``_, masks = pruner.compress()``,
``pruner.show_pruned_weights()``, ``pruner._unwrap_model()``, ``ModelSpeedup(model, dummy_input=...,
masks_file=masks).speedup_model()``, ``count_flops_params`` before and after, then fine-tuning. Each test checks
which channels were chosen against the criterion computed here, the shapes after the speedup, the FLOPs and
parameter counts, and the accuracy on held-out digits after one epoch of fine-tuning.
"""

from __future__ import annotations

import pytest
import torch

from slimkit.compression import FPGMPruner, L1NormPruner, L2NormPruner, LevelPruner, ModelSpeedup, count_flops_params
from slimkit.faces.nni.v1 import LevelPruner as LevelPrunerV1
from tests.faces.nni.digits import accuracy, kept_channels, train

CONVS = ("conv1", "conv2")


def _l1(weight: torch.Tensor) -> torch.Tensor:
    return weight.flatten(1).abs().sum(dim=1)


def _l2(weight: torch.Tensor) -> torch.Tensor:
    return weight.flatten(1).pow(2).sum(dim=1).sqrt()


def _distance_to_others(weight: torch.Tensor) -> torch.Tensor:
    """FPGM's criterion: a filter near the geometric median (small summed distance) is the redundant one."""
    filters = weight.flatten(1)
    return (filters[:, None, :] - filters[None, :, :]).pow(2).sum(dim=-1).sqrt().sum(dim=1)


def _conv_flops(c_in: int, c_out: int) -> int:
    return c_in * c_out * 9 * 8 * 8  # 3x3 kernel, 8x8 map (padding 1)


@pytest.mark.parametrize(("pruner_class", "config", "criterion"), [
    (L1NormPruner, {"sparsity": 0.5, "op_types": ["Conv2d"]}, _l1),
    (L2NormPruner, {"sparsity_per_layer": 0.5, "op_partial_names": ["conv"]}, _l2),  # selects conv1, conv2
    (FPGMPruner, {"sparsity": 0.5, "op_types": ["Conv2d"]}, _distance_to_others),
], ids=["l1norm", "l2norm", "fpgm"])
def test_filter_pruner_then_speedup_then_fine_tune(cnn, digits, capsys, pruner_class, config, criterion):
    train_batches, test_batches = digits
    dummy = torch.randn(1, 1, 8, 8)
    before = {name: cnn.get_submodule(name).weight.detach().clone() for name in CONVS}
    flops0, params0, _ = count_flops_params(cnn, dummy, verbose=False)
    assert flops0 == _conv_flops(1, 16) + _conv_flops(16, 32) + 512 * 64 + 64 * 10

    pruner = pruner_class(cnn, [config])
    model, masks = pruner.compress()
    assert model is cnn and sorted(masks) == list(CONVS)
    for name, weight in before.items():
        kept = kept_channels(masks[name]["weight"])
        assert len(kept) == weight.shape[0] // 2
        ranking = torch.argsort(criterion(weight), descending=True, stable=True)
        assert sorted(kept) == sorted(ranking[: len(kept)].tolist()), name  # the highest-scoring half survives
        assert kept_channels(masks[name]["bias"][:, None]) == kept  # the bias follows its filters

    assert pruner.show_pruned_weights() == [("conv1", 8, 16), ("conv2", 16, 32)]
    assert "simulated prune conv2 remain/total: 16/32" in capsys.readouterr().out

    pruner._unwrap_model()
    ModelSpeedup(cnn, dummy_input=torch.rand(10, 1, 8, 8), masks_file=masks).speedup_model()
    assert (cnn.conv1.out_channels, cnn.bn1.num_features) == (8, 8)
    assert (cnn.conv2.in_channels, cnn.conv2.out_channels, cnn.bn2.num_features) == (8, 16, 16)
    assert (cnn.fc1.in_features, cnn.fc1.out_features) == (16 * 16, 64)  # the head only loses its inputs
    flops, params, layers = count_flops_params(cnn, dummy, verbose=False)
    assert flops == _conv_flops(1, 8) + _conv_flops(8, 16) + 256 * 64 + 64 * 10
    assert params == (8 * 9 + 8) + (16 * 8 * 9 + 16) + (256 * 64 + 64) + (64 * 10 + 10) < 0.5 * params0
    assert {row["name"]: row["weight_shape"] for row in layers}["conv2"] == (16, 8, 3, 3)

    train(cnn, train_batches, epochs=1)
    assert accuracy(cnn, test_batches) >= 0.9


def test_filter_pruner_at_high_sparsity_keeps_the_masked_accuracy_after_speedup(cnn, digits):
    """80% of the filters: the sped-up model is a fifth as wide and fine-tunes back to a useful accuracy."""
    train_batches, test_batches = digits
    pruner = L1NormPruner(cnn, [{"sparsity": 0.8, "op_types": ["Conv2d"]}])
    _, masks = pruner.compress()
    assert [len(kept_channels(masks[name]["weight"])) for name in CONVS] == [4, 7]  # 16 - floor(12.8), 32 - 25
    pruner._unwrap_model()
    ModelSpeedup(cnn, torch.rand(10, 1, 8, 8), masks).speedup_model()
    assert (cnn.conv1.out_channels, cnn.conv2.out_channels, cnn.fc1.in_features) == (4, 7, 7 * 16)
    train(cnn, train_batches, epochs=2)
    assert accuracy(cnn, test_batches) >= 0.85


def test_level_pruner_zeroes_the_smallest_weights_of_every_default_layer(cnn, digits, pretrained):
    train_batches, test_batches = digits
    dummy = torch.randn(1, 1, 8, 8)
    flops0, params0, _ = count_flops_params(cnn, dummy, verbose=False)
    before = {name: module.weight.detach().clone() for name, module in cnn.named_modules()
              if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear))}

    pruner = LevelPruner(cnn, [{"sparsity": 0.5, "op_types": ["default"]}])  # "default": what the pruner supports
    _, masks = pruner.compress()
    assert sorted(masks) == sorted(before)  # every Conv2d and Linear, no BatchNorm
    for name, weight in before.items():
        mask = masks[name]["weight"]
        assert mask.shape == weight.shape and int((mask == 0).sum()) == weight.numel() // 2
        assert weight[mask == 0].abs().max() <= weight[mask == 1].abs().min(), name  # magnitudes, per layer
    masked = accuracy(cnn, test_batches)
    assert masked >= 0.5  # half of every layer's weights gone, before any fine-tuning

    train(cnn, train_batches, epochs=1)  # fine-tune the wrapped model: the masks keep the zeros out
    assert accuracy(cnn, test_batches) >= max(0.9, masked)
    for name, module in cnn.named_modules():
        if name in masks:  # the wrappers: the weights the forward pass uses are still half zero
            assert float((module.module.weight * module.weight_mask == 0).float().mean()) == pytest.approx(0.5)
    # fine-grained sparsity removes no channel: NNI's example counts the same FLOPs and parameters
    assert count_flops_params(cnn, dummy, verbose=False)[:2] == (flops0, params0)


def test_unwrap_model_leaves_the_masked_weights_in_the_layers(cnn):
    """NNI 2.x's ``_unwrap_model()`` leaves ``weight * mask`` in the layers: what a user saves is the pruned model."""
    dense = cnn.fc1.weight.detach().clone()
    x = torch.rand(4, 1, 8, 8)
    pruner = LevelPruner(cnn, [{"sparsity": 0.5, "op_types": ["Linear"]}])
    _, masks = pruner.compress()
    wrapped_out = cnn(x)
    pruner._unwrap_model()
    assert isinstance(cnn.fc1, torch.nn.Linear)
    assert torch.equal(cnn.fc1.weight, dense * masks["fc1"]["weight"])
    assert float((cnn.fc1.weight == 0).float().mean()) == pytest.approx(0.5)
    assert torch.allclose(cnn(x), wrapped_out, atol=1e-6)  # the plain model computes what the wrapped one did
    pruner._unwrap_model()  # a second call changes nothing
    pruner._wrap_model()  # and wrapping again keeps the pruned weights
    assert torch.equal(cnn.fc1.module.weight, dense * masks["fc1"]["weight"])
    assert torch.allclose(cnn(x), wrapped_out, atol=1e-6)


def test_nni1_level_pruner_unwrap_model_keeps_the_dense_weights(cnn):
    """NNI 1.x's spelling keeps slimkit's engine semantics: ``_unwrap_model()`` puts the stored weights back as
    they are; ``unwrap_model(apply_masks=True)`` is the call that multiplies the masks in."""
    dense = cnn.fc1.weight.detach().clone()
    pruner = LevelPrunerV1(cnn, [{"sparsity": 0.5, "op_types": ["Linear"]}])
    pruner.compress()
    mask = {w.name: w for w in pruner.get_modules_wrapper()}["fc1"].weight_mask.clone()
    assert float((mask == 0).float().mean()) == pytest.approx(0.5)
    pruner._unwrap_model()
    assert torch.equal(cnn.fc1.weight, dense)
    pruner._wrap_model()
    assert torch.equal(pruner.unwrap_model(apply_masks=True).fc1.weight, dense * mask)
