"""AGP: sparsity rises on the cubic schedule while training, pruned weights stay zero."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.engines.pruning import AGPEngine, PruningConfigError, agp_sparsity, num_to_prune


def test_schedule_values():
    values = [agp_sparsity(0.8, 0.0, t, 4) for t in range(6)]
    assert values == pytest.approx([0.0, 0.4625, 0.7, 0.7875, 0.8, 0.8])
    assert agp_sparsity(0.9, 0.5, 1, 2) == pytest.approx(0.9 - 0.4 * 0.125)


def test_agp_level_during_training(mlp, digit_batches):
    optimizer = torch.optim.SGD(mlp.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    pruner = AGPEngine(
        mlp, [{"sparsity": 0.75, "op_types": ["Linear"]}, {"exclude": True, "op_names": ["head"]}], optimizer,
        pruning_algorithm="level", num_iterations=3, frequency=2,
    )
    pruner.compress()
    assert all(int((m["weight_mask"] == 0).sum()) == 0 for m in pruner.get_masks().values())
    previous = pruner.get_masks()
    seen = []
    for step in range(1, 9):
        x, y = digit_batches[step % len(digit_batches)]
        optimizer.zero_grad()
        nn.functional.cross_entropy(mlp(x), y).backward()
        optimizer.step()
        t = min(step // 2, 3)
        expected = agp_sparsity(0.75, 0.0, t, 3)
        masks = pruner.get_masks()
        for wrapper in pruner.get_modules_wrapper():
            mask = masks[wrapper.name]["weight_mask"]
            assert int((mask == 0).sum()) == num_to_prune(expected, mask.numel())
            assert torch.count_nonzero(wrapper.module.weight[mask == 0]) == 0  # stored weights zeroed
            assert torch.all(mask <= previous[wrapper.name]["weight_mask"])  # monotonic
        previous = masks
        seen.append(round(1 - float(masks["fc1"]["weight_mask"].mean()), 4))
    assert seen == [0.0, 0.5273, 0.5273, 0.7222, 0.7222, 0.75, 0.75, 0.75]  # 1080, 1479, 1536 of 2048
    assert pruner.current_iteration == 3


def test_agp_filter_epoch_schedule(convnet):
    optimizer = torch.optim.SGD(convnet.parameters(), lr=0.0)
    pruner = AGPEngine(
        convnet, [{"sparsity": 0.5, "op_types": ["Conv2d"]}], optimizer, pruning_algorithm="l1",
        initial_sparsity=0.25, num_iterations=2, schedule="epoch",
    )
    pruner.compress()
    counts = []
    for epoch in range(4):
        pruner.update_epoch(epoch)
        masks = pruner.get_masks()
        counts.append([int((m["weight_mask"].reshape(m["weight_mask"].shape[0], -1).sum(1) == 0).sum())
                       for m in masks.values()])
        optimizer.step()  # steps do not move an epoch schedule
    # targets 0.25, 0.46875, 0.5, 0.5 over 8 and 16 filters
    assert counts == [[2, 4], [3, 7], [4, 8], [4, 8]]


def test_agp_manual_step_without_optimizer(mlp):
    pruner = AGPEngine(mlp, [{"sparsity": 0.5, "op_names": ["fc1"]}], num_iterations=1)
    pruner.compress()
    pruner.step()
    assert int((pruner.get_masks()["fc1"]["weight_mask"] == 0).sum()) == 1024


def test_agp_errors(mlp):
    with pytest.raises(PruningConfigError,
                       match=r"pruning_algorithm .taylor. cannot be used; .* weight-only pruner: fpgm, l1, l1_filter"):
        AGPEngine(mlp, [{"sparsity": 0.5}], pruning_algorithm="taylor")
    with pytest.raises(PruningConfigError, match="num_iterations must be an int >= 1, got 0"):
        AGPEngine(mlp, [{"sparsity": 0.5}], num_iterations=0)
    with pytest.raises(PruningConfigError, match="final sparsity 0.2 is below initial_sparsity 0.3"):
        AGPEngine(mlp, [{"sparsity": 0.2}], initial_sparsity=0.3)


def test_nni1_epoch_keys_follow_nni1_schedule(mlp):
    from slimkit.engines.pruning.agp import epoch_sparsity

    config = {"sparsity": 0.8, "initial_sparsity": 0.0, "start_epoch": 0, "end_epoch": 4, "frequency": 1}
    assert [round(epoch_sparsity(config, e), 4) for e in range(5)] == [0.0, 0.5630, 0.7704, 0.8, 0.8]  # span 3
    assert epoch_sparsity({**config, "start_epoch": 2}, 1) is None  # nothing pruned before start_epoch
    optimizer = torch.optim.SGD(mlp.parameters(), lr=0.0)
    pruner = AGPEngine(mlp, [{"initial_sparsity": 0.0, "final_sparsity": 0.8, "start_epoch": 0, "end_epoch": 7,
                              "frequency": 2, "op_names": ["fc1"]}], optimizer)
    pruner.compress()
    kept = []
    for epoch in range(8):
        pruner.update_epoch(epoch)
        kept.append(round(1 - float(pruner.get_masks()["fc1"]["weight_mask"].mean()), 2))
    assert kept == [0.0, 0.0, 0.56, 0.56, 0.77, 0.77, 0.8, 0.8]  # span 6: moves every 2 epochs


@pytest.mark.parametrize(("entry", "message"), [
    ({"final_sparsity": 0.5, "sparsity": 0.5}, r"gives 'final_sparsity' and 'sparsity'"),
    ({"final_sparsity": 0.5, "start_epoch": -1}, r"AGP start_epoch must be a whole number >= 0"),
    ({"final_sparsity": 0.5, "frequency": 0, "end_epoch": 2}, r"AGP frequency must be a whole number >= 1"),
    ({"final_sparsity": 0.5, "start_epoch": 3, "end_epoch": 1}, r"end_epoch 1 is before start_epoch 3"),
    ({"final_sparsity": 0.2, "initial_sparsity": 0.5, "end_epoch": 2}, r"final sparsity 0.2 is below initial"),
    ({"final_sparsity": 0.5, "start_epochs": 1}, r"unknown key 'start_epochs'\. Did you mean 'start_epoch'"),
])
def test_nni1_epoch_keys_are_validated(mlp, entry, message):
    with pytest.raises(PruningConfigError, match=message):
        AGPEngine(mlp, [{**entry, "op_names": ["fc1"]}])
