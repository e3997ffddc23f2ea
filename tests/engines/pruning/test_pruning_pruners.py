"""Each pruner prunes exactly the requested amount, and the right units."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from slimkit.engines.pruning import (
    ActivationAPoZRankFilterPruner,
    ActivationMeanRankFilterPruner,
    FPGMEngine,
    L1FilterPruner,
    L2FilterPruner,
    LevelEngine,
    PruningConfigError,
    SlimEngine,
    TaylorFOWeightFilterPruner,
    num_to_prune,
)
from slimkit.errors import DataError


def zero_filters(mask: torch.Tensor) -> int:
    return int((mask.reshape(mask.shape[0], -1).sum(dim=1) == 0).sum())


def pruned_filters(mask: torch.Tensor) -> list[int]:
    return (mask.reshape(mask.shape[0], -1).sum(dim=1) == 0).nonzero().flatten().tolist()


def test_num_to_prune_rule():
    assert [num_to_prune(s, 10) for s in (0.0, 0.29, 0.3, 0.5, 0.7, 0.99)] == [0, 2, 3, 5, 7, 9]
    assert num_to_prune(0.29, 100) == 29  # the 1e-6 tolerance absorbs float error (0.29 * 100 = 28.99...)
    assert num_to_prune(0.999, 8) == 7  # one unit always stays
    assert num_to_prune(0.9, 1) == 0


@pytest.mark.parametrize("pruner_cls", [L1FilterPruner, L2FilterPruner, FPGMEngine])
@pytest.mark.parametrize(("sparsity", "expected"), [(0.3, [2, 4, 3]), (0.5, [4, 8, 5]), (0.75, [6, 12, 7])])
def test_filter_pruners_prune_requested_filters(convnet, pruner_cls, sparsity, expected):
    pruner = pruner_cls(convnet, [{"sparsity": sparsity, "op_types": ["default"]}])
    pruner.compress()
    masks = pruner.get_masks()
    assert [zero_filters(masks[n]["weight_mask"]) for n in ("conv1", "conv2", "fc")] == expected
    for layer_masks in masks.values():  # whole filters only, bias follows the weight
        per_filter = layer_masks["weight_mask"].reshape(layer_masks["weight_mask"].shape[0], -1)
        assert torch.all((per_filter.sum(1) == 0) | (per_filter.sum(1) == per_filter.shape[1]))
        assert torch.equal(layer_masks["bias_mask"], (per_filter.sum(1) > 0).float())


@pytest.mark.parametrize("sparsity", [0.3, 0.5, 0.9])
def test_level_pruner_prunes_requested_elements(convnet, sparsity):
    pruner = LevelEngine(convnet, [{"sparsity": sparsity}])
    pruner.compress()
    for name, layer_masks in pruner.get_masks().items():
        numel = layer_masks["weight_mask"].numel()
        assert int((layer_masks["weight_mask"] == 0).sum()) == int(sparsity * numel + 1e-6)
        assert torch.all(layer_masks["bias_mask"] == 1)
        # the kept weights are the largest ones
        weight = convnet.get_submodule(name).module.weight.abs()
        kept, dropped = weight[layer_masks["weight_mask"] == 1], weight[layer_masks["weight_mask"] == 0]
        assert kept.min() >= dropped.max()


def test_one_filter_always_stays():
    model = nn.Sequential(nn.Linear(4, 1), nn.Linear(1, 3))
    pruner = L1FilterPruner(model, [{"sparsity": 0.99, "op_types": ["Linear"]}])
    pruner.compress()
    masks = pruner.get_masks()
    assert zero_filters(masks["0"]["weight_mask"]) == 0
    assert zero_filters(masks["1"]["weight_mask"]) == 2


def _linear_with(rows: list[list[float]]) -> nn.Sequential:
    layer = nn.Linear(len(rows[0]), len(rows), bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(rows))
    return nn.Sequential(layer)


def test_l1_and_l2_rank_by_their_norms():
    rows = [[3.0, 0, 0, 0], [1.0, 1, 1, 1], [5.0, 5, 5, 5]]  # L1: 3, 4, 20   L2: 3, 2, 10
    l1 = L1FilterPruner(_linear_with(rows), [{"sparsity": 0.34, "op_types": ["Linear"]}])
    l1.compress()
    l2 = L2FilterPruner(_linear_with(rows), [{"sparsity": 0.34, "op_types": ["Linear"]}])
    l2.compress()
    assert pruned_filters(l1.get_masks()["0"]["weight_mask"]) == [0]
    assert pruned_filters(l2.get_masks()["0"]["weight_mask"]) == [1]


def test_fpgm_prunes_filters_near_the_geometric_median():
    rows = [[0.0, 0.0], [5.0, 5.0], [6.0, 5.0], [4.0, 5.0], [5.0, 6.0], [5.0, 4.0]]
    fpgm = FPGMEngine(_linear_with(rows), [{"sparsity": 0.2, "op_types": ["Linear"]}])
    fpgm.compress()
    assert pruned_filters(fpgm.get_masks()["0"]["weight_mask"]) == [1]  # the centre, not the small outlier
    l1 = L1FilterPruner(_linear_with(rows), [{"sparsity": 0.2, "op_types": ["Linear"]}])
    l1.compress()
    assert pruned_filters(l1.get_masks()["0"]["weight_mask"]) == [0]


def test_ties_are_broken_by_lower_index():
    pruner = L1FilterPruner(_linear_with([[1.0, 1.0]] * 6), [{"sparsity": 0.5, "op_types": ["Linear"]}])
    pruner.compress()
    assert pruned_filters(pruner.get_masks()["0"]["weight_mask"]) == [0, 1, 2]


def _set_gammas(convnet):
    with torch.no_grad():
        convnet.bn1.weight.copy_(torch.tensor([0.1, 0.9, 0.2, 0.8, 0.05, 0.7, 0.3, 0.6]))
        convnet.bn2.weight.copy_(torch.linspace(0.011, 0.161, 16))


def test_slim_pruner_global_ranking(convnet):
    _set_gammas(convnet)
    pruner = SlimEngine(convnet, [{"sparsity": 0.5, "op_types": ["BatchNorm2d"]}])
    pruner.compress()
    masks = pruner.get_masks()
    # 24 channels -> 12 pruned, the 12 smallest |gamma| overall: 0.05 and 0.1 of bn1, 0.011 ... 0.101 of bn2
    assert pruned_filters(masks["bn1"]["weight_mask"]) == [0, 4]
    assert pruned_filters(masks["bn2"]["weight_mask"]) == list(range(10))
    assert torch.equal(masks["bn2"]["bias_mask"], masks["bn2"]["weight_mask"])
    assert torch.equal(convnet.bn1.module.weight[4], torch.tensor(0.05))  # stored gamma untouched


def test_slim_pruner_keeps_one_channel_per_layer_and_layer_scope(convnet):
    with torch.no_grad():
        convnet.bn1.weight.fill_(0.001)
        convnet.bn2.weight.fill_(1.0)
    pruner = SlimEngine(convnet, [{"sparsity": 0.5}])
    pruner.compress()
    masks = pruner.get_masks()
    assert zero_filters(masks["bn1"]["weight_mask"]) == 7
    assert zero_filters(masks["bn2"]["weight_mask"]) == 5
    pruner.unwrap_model()
    layer = SlimEngine(convnet, [{"sparsity": 0.5}, {"sparsity": 0.25, "op_names": ["bn2"]}], scope="layer")
    layer.compress()
    assert [zero_filters(m["weight_mask"]) for m in layer.get_masks().values()] == [4, 4]
    layer.unwrap_model()
    with pytest.raises(PruningConfigError, match=r"needs one sparsity for all BatchNorm layers, got \[0.25, 0.5\]"):
        SlimEngine(convnet, [{"sparsity": 0.5}, {"sparsity": 0.25, "op_names": ["bn2"]}])


def test_taylor_prunes_dead_filters_and_restores_grads(convnet, digit_batches):
    with torch.no_grad():
        convnet.conv1.weight[[1, 5]] = 0.0
    marker = torch.full_like(convnet.fc.weight, 7.0)
    convnet.fc.weight.grad = marker.clone()
    before = copy.deepcopy(convnet.state_dict())
    pruner = TaylorFOWeightFilterPruner(
        convnet, [{"sparsity": 0.25, "op_names": ["conv1"]}, {"sparsity": 0.5, "op_names": ["conv2"]}],
        criterion=nn.functional.cross_entropy, dataloader=digit_batches, statistics_batch_num=3,
    )
    pruner.compress()
    masks = pruner.get_masks()
    assert pruned_filters(masks["conv1"]["weight_mask"]) == [1, 5]
    assert zero_filters(masks["conv2"]["weight_mask"]) == 8
    assert [w.contribution_batches for w in pruner.get_modules_wrapper()] == [3, 3]
    assert torch.equal(convnet.fc.weight.grad, marker)
    plain = pruner.unwrap_model()
    assert all(torch.equal(plain.state_dict()[k], v) for k, v in before.items())


def test_taylor_trainer_mode_matches_dataloader_mode(convnet, digit_batches):
    twin = copy.deepcopy(convnet)
    config = [{"sparsity": 0.5, "op_types": ["Conv2d"]}]
    by_data = TaylorFOWeightFilterPruner(
        convnet, config, criterion=nn.functional.cross_entropy, dataloader=digit_batches, statistics_batch_num=2
    )
    by_data.compress()

    def trainer(model, optimizer, criterion, epoch):
        for x, y in digit_batches:  # four batches; only the first two are used for statistics
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()

    optimizer = torch.optim.SGD(twin.parameters(), lr=0.0)
    by_trainer = TaylorFOWeightFilterPruner(
        twin, config, optimizer, trainer=trainer, criterion=nn.functional.cross_entropy, statistics_batch_num=2
    )
    by_trainer.compress()
    assert [w.contribution_batches for w in by_trainer.get_modules_wrapper()] == [2, 2]
    for name, masks in by_data.get_masks().items():
        assert torch.equal(by_trainer.get_masks()[name]["weight_mask"], masks["weight_mask"])


def test_data_pruners_need_data(convnet):
    no_data = TaylorFOWeightFilterPruner(convnet, [{"sparsity": 0.5}])
    with pytest.raises(PruningConfigError, match="ranks filters with data: pass dataloader="):
        no_data.compress()
    no_data.unwrap_model()
    with pytest.raises(PruningConfigError, match=r"\(trainer=...\) also needs optimizer="):
        ActivationAPoZRankFilterPruner(convnet, [{"sparsity": 0.5}], trainer=lambda *a: None)
    with pytest.raises(PruningConfigError, match="statistics_batch_num must be an int >= 1, got 0"):
        ActivationMeanRankFilterPruner(convnet, [{"sparsity": 0.5}], dataloader=[], statistics_batch_num=0)
    with pytest.raises(DataError, match="the dataloader yielded no batch"):
        ActivationMeanRankFilterPruner(convnet, [{"sparsity": 0.5}], dataloader=[]).compress()


def test_apoz_prunes_always_off_channels(convnet, digit_batches):
    with torch.no_grad():
        convnet.conv1.bias[[2, 6]] = -100.0
        convnet.fc.bias.fill_(100.0)
        convnet.fc.bias[[0, 9]] = -100.0
    pruner = ActivationAPoZRankFilterPruner(
        convnet, [{"sparsity": 0.25, "op_types": ["default"]}], dataloader=digit_batches, statistics_batch_num=2
    )
    pruner.compress()
    masks = pruner.get_masks()
    assert pruned_filters(masks["conv1"]["weight_mask"]) == [2, 6]
    assert pruned_filters(masks["fc"]["weight_mask"]) == [0, 9]
    assert zero_filters(masks["conv2"]["weight_mask"]) == 4
    assert [len(w.collected_activation) for w in pruner.get_modules_wrapper()] == [2, 2, 2]
    assert all(not w._forward_hooks for w in pruner.get_modules_wrapper())  # collector removed


def test_mean_activation_prunes_weakest_channels(mlp, digits):
    with torch.no_grad():
        mlp.fc1.bias.fill_(5.0)
        mlp.fc1.bias[[3, 7, 30]] = -5.0
        mlp.fc1.bias[11] = -0.2  # weak but not dead: fourth to go
    x = digits[0][:128]
    pruner = ActivationMeanRankFilterPruner(
        mlp, [{"sparsity": 0.125, "op_names": ["fc1"]}], dataloader=[x[:64], x[64:]], statistics_batch_num=2
    )
    pruner.compress()
    assert pruned_filters(pruner.get_masks()["fc1"]["weight_mask"]) == [3, 7, 11, 30]
