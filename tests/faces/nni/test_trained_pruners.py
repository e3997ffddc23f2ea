"""NNI 2.x's pruners that train or watch training: Slim, Taylor-FO, APoZ, mean activation, ADMM and movement.

They take NNI 2.x's training triple: ``trainer(model, optimizer, criterion)`` (one epoch of the user's loop), an
optimizer built through ``nni.trace`` (``import slimkit as nni``) and the ``criterion``; plus their own keys
(``training_epochs``, ``training_batches``, ``scale``, ``mode``, ``iterations``, ``granularity``,
``warm_up_step``, ``cool_down_beginning_step``). Each test checks the choice against the statistic computed
here, the sparsity reached and the model after speedup and fine-tuning.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import slimkit as nni
from slimkit.compression import (
    ActivationAPoZRankPruner,
    ActivationMeanRankPruner,
    ADMMPruner,
    ModelSpeedup,
    MovementPruner,
    SlimPruner,
    TaylorFOWeightPruner,
)
from tests.faces.nni.digits import Batch, accuracy, kept_channels, make_trainer, train

CONVS = ("conv1", "conv2")


def _sgd(model: nn.Module, lr: float = 0.01) -> torch.optim.Optimizer:
    """The optimizer as NNI 2.x's examples build it: a traced class, so the pruner can rebuild it."""
    return nni.trace(torch.optim.SGD)(model.parameters(), lr=lr, momentum=0.9 if lr else 0.0)


def test_slim_pruner_ranks_batchnorm_scales_globally_under_the_per_layer_cap(cnn, digits):
    train_batches, test_batches = digits
    with torch.no_grad():  # bn1's scales are tiny: a global ranking would take all of bn1 without the cap
        cnn.bn1.weight.mul_(1e-3)
    penalties: list[tuple[float, float]] = []

    def trainer(model, optimizer, criterion):
        model.train()
        for data, target in train_batches:
            optimizer.zero_grad()
            output = model(data)
            loss = criterion(output, target)
            gammas = sum(float(m.weight.detach().abs().sum()) for m in model.modules() if isinstance(m, nn.BatchNorm2d))
            penalties.append((float(loss.detach() - nn.functional.cross_entropy(output.detach(), target)), gammas))
            loss.backward()
            optimizer.step()

    config = [{"total_sparsity": 0.5, "op_types": ["BatchNorm2d"], "max_sparsity_per_layer": 0.9}]
    pruner = SlimPruner(cnn, config, trainer, _sgd(cnn), nn.CrossEntropyLoss(), training_epochs=1, scale=0.0001,
                        mode="global")
    _, masks = pruner.compress()
    assert len(penalties) == len(train_batches)  # one epoch, with the L1 penalty on the scales added to the loss
    assert all(extra == pytest.approx(1e-4 * gammas, rel=1e-3) for extra, gammas in penalties)

    assert sorted(masks) == ["bn1", "bn2"]
    kept = {name: kept_channels(masks[name]["weight"][:, None]) for name in masks}
    # 24 of the 48 channels go; bn1 may lose at most floor(0.9 * 16) = 14 of them, bn2 loses the other 10
    assert (len(kept["bn1"]), len(kept["bn2"])) == (2, 22)
    pruner._unwrap_model()
    gamma2 = cnn.bn2.weight.detach().abs()  # as the penalised epoch left them
    assert sorted(kept["bn2"]) == sorted(torch.argsort(gamma2, descending=True)[:22].tolist())
    ModelSpeedup(cnn, torch.rand(10, 1, 8, 8), masks).speedup_model()  # BatchNorm masks shrink their convs
    assert (cnn.conv1.out_channels, cnn.bn1.num_features, cnn.conv2.in_channels) == (2, 2, 2)
    assert (cnn.conv2.out_channels, cnn.bn2.num_features, cnn.fc1.in_features) == (22, 22, 22 * 16)
    train(cnn, train_batches, epochs=2)
    assert accuracy(cnn, test_batches) >= 0.85


def _conv_outputs(model: nn.Module, batches: list[Batch]) -> dict[str, list[torch.Tensor]]:
    """Each conv's raw output on ``batches`` with the model in train mode (BatchNorm on batch statistics)."""
    seen: dict[str, list[torch.Tensor]] = {name: [] for name in CONVS}
    hooks = [model.get_submodule(name).register_forward_hook(
        lambda _m, _i, out, name=name: seen[name].append(out.detach())) for name in CONVS]
    model.train()
    with torch.no_grad():
        for data, _ in batches:
            model(data)
    for hook in hooks:
        hook.remove()
    return seen


def _apoz_keep(model: nn.Module, batches: list[Batch]) -> dict[str, torch.Tensor]:
    """1 - average percentage of zeros after ReLU, per channel (higher: keep)."""
    outs = _conv_outputs(model, batches)
    return {name: 1 - torch.cat([(o <= 0).float().transpose(0, 1).flatten(1) for o in out], 1).mean(1)
            for name, out in outs.items()}


def _mean_keep(model: nn.Module, batches: list[Batch]) -> dict[str, torch.Tensor]:
    """Mean activation after ReLU, per channel (higher: keep)."""
    outs = _conv_outputs(model, batches)
    return {name: torch.cat([o.clamp(min=0).transpose(0, 1).flatten(1) for o in out], 1).mean(1)
            for name, out in outs.items()}


def _taylor_keep(model: nn.Module, batches: list[Batch]) -> dict[str, torch.Tensor]:
    """Summed over the batches: (sum over a filter of weight * gradient)^2 (higher: keep)."""
    model.train()
    total = {name: torch.zeros(model.get_submodule(name).out_channels) for name in CONVS}
    for data, target in batches:
        model.zero_grad()
        nn.functional.cross_entropy(model(data), target).backward()
        for name in CONVS:
            weight = model.get_submodule(name).weight
            total[name] += (weight.detach() * weight.grad).flatten(1).sum(1).pow(2)
    return total


@pytest.mark.parametrize(("pruner_class", "reference"), [
    (TaylorFOWeightPruner, _taylor_keep),
    (ActivationAPoZRankPruner, _apoz_keep),
    (ActivationMeanRankPruner, _mean_keep),
], ids=["taylorfo", "apoz", "mean"])
def test_data_ranked_pruner_uses_the_first_training_batches(cnn, digits, pruner_class, reference):
    train_batches, test_batches = digits
    seen: list[int] = []
    scores = reference(copy.deepcopy(cnn), train_batches[:5])
    # lr=0: the statistics come from the model as it is, so the reference above saw the same numbers
    pruner = pruner_class(cnn, [{"total_sparsity": 0.5, "op_types": ["Conv2d"]}], make_trainer(train_batches, seen),
                          _sgd(cnn, lr=0.0), nn.CrossEntropyLoss(), training_batches=5)
    _, masks = pruner.compress()
    assert len(seen) == len(train_batches)  # the trainer ran its epoch; the statistics used its first 5 batches
    for name in CONVS:
        kept = kept_channels(masks[name]["weight"])
        dropped = sorted(set(range(len(scores[name]))) - set(kept))
        assert len(kept) == len(dropped)  # "normal" mode: each layer loses half
        assert scores[name][dropped].max() <= scores[name][kept].min() * (1 + 1e-4) + 1e-9, name

    pruner._unwrap_model()
    ModelSpeedup(cnn, torch.rand(10, 1, 8, 8), masks).speedup_model()
    assert (cnn.conv1.out_channels, cnn.conv2.out_channels, cnn.fc1.in_features) == (8, 16, 16 * 16)
    train(cnn, train_batches, epochs=1)
    assert accuracy(cnn, test_batches) >= 0.9


def test_movement_pruner_learns_scores_while_training(digits):
    """A tiny MLP trained from scratch: one epoch of warm-up, sparsity rising over the second, a third at 50%."""
    train_batches, test_batches = digits
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    seen: list[int] = []
    epoch = len(train_batches)
    pruner = MovementPruner(mlp, [{"sparsity": 0.5, "op_types": ["Linear"]}], make_trainer(train_batches, seen),
                            nni.trace(torch.optim.Adam)(mlp.parameters(), lr=0.01), nn.CrossEntropyLoss(),
                            training_epochs=3, warm_up_step=epoch, cool_down_beginning_step=2 * epoch)
    model, masks = pruner.compress()
    assert model is mlp and len(seen) == 3 * epoch and sorted(masks) == ["1", "3"]
    for wrapper in pruner.get_modules_wrapper():
        mask = masks[wrapper.name]["weight"]
        assert float((mask == 0).float().mean()) == pytest.approx(0.5, abs=1 / mask.numel())
        score = wrapper.movement_score
        assert score[mask == 0].max() <= score[mask == 1].min()  # the lowest movement scores are pruned
    assert accuracy(mlp, test_batches) >= 0.85  # trained with the masks it ends with


@pytest.mark.parametrize("granularity", ["coarse-grained", "fine-grained"])
def test_admm_pruner_then_speedup_then_fine_tune(cnn, digits, granularity):
    train_batches, test_batches = digits
    seen: list[int] = []
    pruner = ADMMPruner(cnn, [{"sparsity": 0.8, "op_types": ["Conv2d"]}], make_trainer(train_batches, seen),
                        _sgd(cnn), nn.CrossEntropyLoss(), iterations=2, training_epochs=1, granularity=granularity)
    _, masks = pruner.compress()
    assert len(seen) == 2 * len(train_batches)  # iterations=2 ADMM rounds of training_epochs=1 epoch each
    if granularity == "fine-grained":  # single weights: 80% of each conv's weights are zero, no channel removed
        for name in CONVS:
            assert float((masks[name]["weight"] == 0).float().mean()) == pytest.approx(0.8, abs=0.01)
        return
    assert [len(kept_channels(masks[name]["weight"])) for name in CONVS] == [4, 7]
    pruner._unwrap_model()
    ModelSpeedup(cnn, torch.randn([128, 1, 8, 8]), masks).speedup_model()
    assert (cnn.conv1.out_channels, cnn.conv2.in_channels, cnn.conv2.out_channels) == (4, 4, 7)
    train(cnn, train_batches, epochs=1)
    assert accuracy(cnn, test_batches) >= 0.8

