"""Pruners that train (issue 24): ADMM, AutoCompress, lottery ticket, movement, and how they call trainers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.engines.pruning import (
    ADMMEngine,
    AutoCompressEngine,
    LotteryTicketEngine,
    MovementEngine,
    PruningConfigError,
    agp_sparsity,
)
from slimkit.engines.pruning.admm import project

CONV = [{"sparsity": 0.5, "op_types": ["Conv2d"]}]


def _filters_zero(model: nn.Module, name: str) -> int:
    return int((model.get_submodule(name).weight.flatten(1).abs().sum(1) == 0).sum())


def test_admm_projection_keeps_the_strongest_filters(convnet):
    pruner = ADMMEngine(convnet, CONV, dataloader=[], num_iterations=1, training_epochs=1)
    value = torch.zeros_like(convnet.conv1.module.weight)
    value[[1, 4, 6, 7]] = torch.arange(1.0, 5.0)[:, None, None, None]
    projected = project(pruner, 0, value, 0.5)
    assert torch.equal(projected, value)  # already 4 zero filters of 8: nothing else goes
    value[0] = 0.5
    projected = project(pruner, 0, value, 0.5)
    assert projected[0].abs().sum() == 0 and torch.equal(projected[[1, 4, 6, 7]], value[[1, 4, 6, 7]])
    assert torch.equal(convnet.conv1.module.weight, pruner.modules_wrapper[0].module.weight)  # weights untouched


def test_admm_with_an_auptimizer_trainer_and_callback(convnet, digit_batches):
    seen = []

    def trainer(model, optimizer, criterion, epoch, callback):  # Auptimizer's / NNI 1.x form
        for x, y in digit_batches:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            before = model.conv1.module.weight.grad.clone()
            callback()
            seen.append(float((model.conv1.module.weight.grad - before).abs().sum()))
            optimizer.step()

    pruner = ADMMEngine(convnet, CONV, trainer, num_iterations=3, training_epochs=1, row=1.0, lr=1e-2)
    pruner.compress()
    assert len(seen) == 3 * len(digit_batches)
    assert seen[0] > 0  # the augmented term's gradient row * (W - Z + U) was added
    assert len(pruner.residuals) == 3
    model = pruner.unwrap_model(apply_masks=True)
    assert [_filters_zero(model, "conv1"), _filters_zero(model, "conv2")] == [4, 8]


def test_admm_penalty_goes_into_a_criterion_when_the_trainer_has_no_callback(convnet, digit_batches):
    values = []

    def trainer(model, optimizer, criterion):  # NNI 2.x form: the penalty rides in the criterion
        x, y = digit_batches[0]
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        with torch.no_grad():
            distance = sum(float(((w.module.weight - project(pruner, i, w.module.weight.clone(), 0.5)) ** 2).sum())
                           for i, w in enumerate(pruner.modules_wrapper))
            values.append((float(loss) - float(nn.functional.cross_entropy(model(x), y)), distance))
        loss.backward()
        optimizer.step()

    pruner = ADMMEngine(convnet, CONV, trainer, num_iterations=2, training_epochs=1, row=10.0)
    pruner.compress()
    penalty, distance = values[0]  # first W-step: Z = project(W), U = 0, so the term is row/2 * ||W - Z||^2
    assert penalty == pytest.approx(10.0 / 2 * distance, rel=1e-4) and penalty > 0


def test_admm_errors(convnet):
    with pytest.raises(PruningConfigError, match="pass trainer=fn"):
        ADMMEngine(convnet, CONV)
    with pytest.raises(PruningConfigError, match="row .* must be a number > 0"):
        ADMMEngine(convnet, CONV, dataloader=[], row=0)
    with pytest.raises(PruningConfigError, match="num_iterations must be an int >= 1"):
        ADMMEngine(convnet, CONV, dataloader=[], num_iterations=0)
    with pytest.raises(PruningConfigError, match="arguments \\['data'\\] are unknown"):
        ADMMEngine(convnet, CONV, lambda model, data: None, num_iterations=1, training_epochs=1).compress()


def test_auto_compress_rounds(convnet, digit_batches):
    pruner = AutoCompressEngine(convnet, CONV, evaluator=lambda m: float((m(digit_batches[0][0]).argmax(1) ==
                                                                         digit_batches[0][1]).float().mean()),
                                dataloader=digit_batches, num_iterations=2, admm_num_iterations=1,
                                admm_training_epochs=1, cool_down_rate=0.5, row=0.1)
    assert pruner.round_goal(1) == pytest.approx(1 - 0.5**0.5)
    pruner.compress()
    assert [len(r) for r in pruner.residuals] == [1, 1]
    assert pruner.overall_sparsity(pruner.allocation) >= 0.5
    goals = sorted({round(h["sparsity"], 2) for h in pruner.history})
    assert goals[0] >= round(1 - 0.5**0.5, 2) - 0.01 and goals[-1] >= 0.5  # round 1, then the target


# torch notices the step patched after the scheduler was built; the pruner's step still runs the original
@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
def test_lottery_ticket_rounds_rewind_and_reset(convnet, digit_batches):
    initial = {k: v.clone() for k, v in convnet.state_dict().items()}
    optimizer = torch.optim.SGD(convnet.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    config = [{"sparsity": 0.75, "prune_iterations": 2, "op_types": ["Conv2d"]}]
    pruner = LotteryTicketEngine(convnet, config, optimizer, scheduler)
    assert list(pruner.get_prune_iterations()) == [0, 1, 2]
    pruner.compress()
    for k in pruner.get_prune_iterations():
        pruner.prune_iteration_start()
        for wrapper in pruner.get_modules_wrapper():
            pruned = int((wrapper.weight_mask == 0).sum())
            assert pruned == int((1 - (1 - 0.75) ** (k / 2)) * wrapper.weight_mask.numel() + 1e-6)
            if k:  # the surviving weights are the initial ones again, the pruned ones zero
                start = initial[f"{wrapper.name}.weight"]
                mask = wrapper.weight_mask.bool()
                assert torch.equal(wrapper.module.weight[mask], start[mask])
                assert wrapper.module.weight[~mask].abs().sum() == 0
                assert optimizer.state_dict()["state"] == {} and scheduler.last_epoch == 0
        for x, y in digit_batches:
            optimizer.zero_grad()
            nn.functional.cross_entropy(convnet(x), y).backward()
            optimizer.step()
        scheduler.step()
    with pytest.raises(PruningConfigError, match="all 2 pruning rounds have run"):
        pruner.prune_iteration_start()


def test_lottery_ticket_late_rewinding_and_errors(convnet, digit_batches):
    optimizer = torch.optim.SGD(convnet.parameters(), lr=0.1)
    pruner = LotteryTicketEngine(convnet, [{"sparsity": 0.5, "prune_iterations": 1, "op_types": ["Conv2d"]}],
                                 optimizer, rewind_step=2, base_algo="l1")
    pruner.prune_iteration_start()
    for step, (x, y) in enumerate(digit_batches):
        optimizer.zero_grad()
        nn.functional.cross_entropy(convnet(x), y).backward()
        optimizer.step()
        if step == 1:
            after_two = convnet.conv2.module.weight.detach().clone()
    pruner.prune_iteration_start()
    keep = pruner.modules_wrapper[1].weight_mask.bool()
    assert torch.equal(convnet.conv2.module.weight[keep], after_two[keep])
    assert _filters_zero(pruner.unwrap_model(apply_masks=True), "conv2") == 8
    with pytest.raises(PruningConfigError, match="pass the optimizer"):
        LotteryTicketEngine(convnet, [{"sparsity": 0.5}])
    with pytest.raises(PruningConfigError, match="same prune_iterations"):
        LotteryTicketEngine(convnet, [{"sparsity": 0.5, "prune_iterations": 2, "op_names": ["conv1"]},
                                      {"sparsity": 0.5, "prune_iterations": 3, "op_names": ["conv2"]}], optimizer)


def test_movement_scores_are_the_accumulated_movement():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # weights fixed: the scores alone move
    pruner = MovementEngine(model, [{"sparsity": 0.5, "op_types": ["Linear"]}], optimizer=optimizer,
                            warm_up_step=0, cool_down_beginning_step=2)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    expected = torch.zeros(3, 4)
    for _ in range(2):
        optimizer.zero_grad()
        weight = model[0].module.weight * pruner.modules_wrapper[0].weight_mask
        grad = torch.autograd.grad(nn.functional.cross_entropy(x @ weight.t() + model[0].module.bias, y), weight)[0]
        expected -= grad * model[0].module.weight.detach()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    score = pruner.modules_wrapper[0].movement_score
    assert torch.allclose(score, expected, atol=1e-6)
    mask = pruner.modules_wrapper[0].weight_mask
    assert int((mask == 0).sum()) == 6 and score[mask == 1].min() >= score[mask == 0].max()
    assert model[0].module.weight.abs().min() > 0  # masked weights keep their values (they may come back)


def test_movement_schedule_and_filters(convnet, digit_batches):
    pruner = MovementEngine(convnet, CONV, dataloader=digit_batches, training_epochs=3, granularity="filter",
                            warm_up_step=2)
    assert pruner.cool_down_beginning_step == 2 + 2 * (3 * len(digit_batches) - 2) // 3  # 2/3 after warm-up
    wrapper = pruner.modules_wrapper[1]
    pruner.step_count = 1
    assert pruner.current_sparsity(wrapper) == 0.0
    pruner.step_count = 5
    assert pruner.current_sparsity(wrapper) == pytest.approx(agp_sparsity(0.5, 0.0, 3, 6))
    pruner.step_count = 0
    pruner.compress()
    assert pruner.step_count == 3 * len(digit_batches)
    model = pruner.unwrap_model(apply_masks=True)
    assert [_filters_zero(model, "conv1"), _filters_zero(model, "conv2")] == [4, 8]
    with pytest.raises(PruningConfigError, match="granularity must be"):
        MovementEngine(convnet, CONV, dataloader=digit_batches, training_epochs=1, granularity="block")
    with pytest.raises(PruningConfigError, match="needs cool_down_beginning_step"):
        MovementEngine(convnet, CONV, optimizer=torch.optim.SGD(convnet.parameters(), lr=0.1))


def test_movement_with_an_nni2_trainer_and_training_steps(convnet, digit_batches):
    calls = []

    def trainer(model, optimizer, criterion):  # NNI 2.x: one epoch of the user's loop
        calls.append(1)
        for x, y in digit_batches:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()

    optimizer = torch.optim.Adam(convnet.parameters(), lr=1e-3)
    pruner = MovementEngine(convnet, CONV, trainer, optimizer, nn.CrossEntropyLoss(), training_steps=6)
    assert pruner.cool_down_beginning_step == 4
    pruner.compress()
    assert len(calls) == 2 and pruner.step_count == 8  # whole epochs of 4 steps until 6 steps ran
    model = pruner.unwrap_model(apply_masks=True)
    assert float((model.conv2.weight == 0).float().mean()) == pytest.approx(0.5, abs=0.01)
    lazy = MovementEngine(nn.Sequential(nn.Linear(4, 2)), [{"sparsity": 0.5}], lambda model, optimizer: None,
                          training_epochs=1, cool_down_beginning_step=3)
    with pytest.raises(PruningConfigError, match="without calling optimizer.step"):
        lazy.compress()
