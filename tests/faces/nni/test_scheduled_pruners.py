"""NNI 2.x's scheduled pruners: Linear, AGP and lottery-ticket rounds, and simulated annealing.

They take a ``pruning_algorithm`` name (``"l1"`` here), ``total_iteration`` or the annealing temperatures, a
``finetuner(model)`` and an ``evaluator(model) -> score``, run by ``compress()``; ``get_best_result()`` returns
``(task_id, model, masks, score, config_list)``. The tests follow each round through the finetuner and
evaluator calls and check the schedule, the rewinding, the sparsity reached and the best result's consistency.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.compression import AGPPruner, LinearPruner, LotteryTicketPruner, SimulatedAnnealingPruner
from tests.faces.nni.digits import accuracy, kept_channels, make_trainer

CONFIG = [{"op_types": ["Conv2d"], "sparsity": 0.8}]


def _finetuner(batches, log: list[dict[str, object]]):
    """NNI 2.x's ``finetuner(model)``: one epoch with a fresh optimizer; logs the masks and weights it starts from."""
    def finetuner(model: nn.Module) -> None:
        layer = model.get_submodule("conv1")  # wrapped by the round's pruner
        log.append({"kept": (kept_channels(layer.weight_mask), kept_channels(model.get_submodule("conv2").weight_mask)),
                    "conv1": layer.module.weight.detach().clone()})
        make_trainer(batches)(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), nn.CrossEntropyLoss())
    return finetuner


@pytest.mark.parametrize(("pruner_class", "schedule"), [
    (LinearPruner, [0.4, 0.8]),  # s * i / n
    (AGPPruner, [0.7, 0.8]),  # s * (1 - (1 - i / n)^3)
    (LotteryTicketPruner, [1 - 0.2 ** 0.5, 0.8]),  # 1 - (1 - s)^(i / n)
], ids=["linear", "agp", "lottery"])
def test_iterative_pruner_rounds_follow_the_schedule(cnn, digits, pruner_class, schedule):
    train_batches, test_batches = digits
    start = cnn.conv1.weight.detach().clone()
    log: list[dict[str, object]] = []
    scores: list[float] = []

    def evaluator(model: nn.Module) -> float:
        scores.append(accuracy(model, test_batches))
        return scores[-1]

    extra = {"reset_weight": True} if pruner_class is LotteryTicketPruner else {}
    pruner = pruner_class(cnn, CONFIG, pruning_algorithm="l1", total_iteration=2, evaluator=evaluator,
                          finetuner=_finetuner(train_batches, log), keep_intermediate_result=True, **extra)
    pruner.compress()
    assert len(log) == len(scores) == 2
    for entry, ratio in zip(log, schedule, strict=True):
        assert [len(k) for k in entry["kept"]] == [16 - int(ratio * 16), 32 - int(ratio * 32)]
    assert set(log[1]["kept"][0]) <= set(log[0]["kept"][0])  # masks only grow: a pruned channel stays pruned
    kept = log[1]["kept"][0]
    rewound = torch.equal(log[1]["conv1"][kept], start[kept])  # round 2 starts from the original weights?
    assert rewound == (pruner_class is LotteryTicketPruner)

    task_id, model, masks, score, config_list = pruner.get_best_result()
    assert score == max(scores) and task_id == scores.index(score) + 1
    assert config_list[0]["sparsity"] == pytest.approx(schedule[task_id - 1])
    assert len(kept_channels(masks["conv1"]["weight"])) == len(log[task_id - 1]["kept"][0])
    assert accuracy(model, test_batches) == score >= 0.85  # the returned model is the one that was scored
    assert float((model.conv1.weight == 0).float().mean()) == pytest.approx(1 - len(log[task_id - 1]["kept"][0]) / 16)


def test_agp_pruner_with_speedup_shrinks_the_model_every_round(cnn, digits):
    train_batches, test_batches = digits
    widths: list[tuple[int, int]] = []

    def finetuner(model: nn.Module) -> None:
        widths.append((model.conv1.out_channels, model.conv2.out_channels))
        make_trainer(train_batches)(model, torch.optim.Adam(model.parameters(), lr=0.01), nn.CrossEntropyLoss())

    pruner = AGPPruner(cnn, CONFIG, pruning_algorithm="l1", total_iteration=2, finetuner=finetuner, speedup=True,
                       dummy_input=torch.rand(10, 1, 8, 8))
    pruner.compress()
    assert widths == [(16 - 11, 32 - 22), (16 - 12, 32 - 25)]  # 70% then 80% of the original channels removed
    _, model, _, score, _ = pruner.get_best_result()
    assert score is None  # no evaluator: the last round is the result
    assert (model.conv1.out_channels, model.bn1.num_features, model.conv2.out_channels, model.fc1.in_features) == \
        (4, 4, 7, 7 * 16)
    assert accuracy(model, test_batches) >= 0.8


def test_iterative_pruner_with_speedup_returns_the_best_rounds_model(cnn):
    def evaluator(model: nn.Module) -> float:
        return float(model.conv1.out_channels)  # prefers the wider model: round 1 (5 filters) over round 2 (4)

    pruner = AGPPruner(cnn, CONFIG, pruning_algorithm="l1", total_iteration=2, evaluator=evaluator, speedup=True,
                       dummy_input=torch.rand(10, 1, 8, 8))
    pruner.compress()
    task_id, model, masks, score, _ = pruner.get_best_result()
    assert (task_id, score) == (1, 5.0)
    assert (model.conv1.out_channels, model.bn1.num_features, model.conv2.in_channels) == (5, 5, 5)
    assert len(kept_channels(masks["conv1"]["weight"])) == 5  # the round's masks match the round's model
    assert model is not cnn and cnn.conv1.out_channels == 4  # the last round went on shrinking the model it pruned
    assert model(torch.rand(3, 1, 8, 8)).shape == (3, 10)


def test_simulated_annealing_pruner_reaches_the_total_sparsity(cnn, digits):
    train_batches, test_batches = digits
    scores: list[float] = []
    log: list[dict[str, object]] = []

    def evaluator(model: nn.Module) -> float:
        scores.append(accuracy(model, test_batches))
        return scores[-1]

    pruner = SimulatedAnnealingPruner(cnn, [{"op_types": ["Conv2d"], "total_sparsity": 0.8}], pruning_algorithm="l1",
                                      evaluator=evaluator, cool_down_rate=0.5, finetuner=_finetuner(train_batches, log))
    pruner.compress()
    # the start and one perturbation per temperature above the stop (100, 50, 25; 12.5 < 20), then the choice
    assert len(scores) == 1 + 3 + 1 and len(log) == 1  # only the chosen allocation is fine-tuned
    _, model, masks, score, config_list = pruner.get_best_result()
    assert score == scores[-1] == accuracy(model, test_batches)
    assert sorted(masks) == ["conv1", "conv2"]
    weights = {name: model.get_submodule(name).weight for name in masks}
    pruned = sum(int((w == 0).sum()) for w in weights.values()) / sum(w.numel() for w in weights.values())
    assert pruned == pytest.approx(0.8, abs=0.05)  # 80% of the conv weights together, shared out by the search
    allocation = {entry["op_names"][0]: entry["total_sparsity"] for entry in config_list}
    for name, sparsity in allocation.items():
        assert 1 - len(kept_channels(masks[name]["weight"])) / weights[name].shape[0] == pytest.approx(sparsity,
                                                                                                     abs=0.07)
