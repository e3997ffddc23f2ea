"""NNI 3.0-style pruning scripts (our own) on the digits: 3.0 signatures and keys, masks, speedup, fine-tune."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.compression import TorchEvaluator, count_flops_params
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.faces.nni import trace
from slimkit.faces.nni.v3.pruning import (
    AGPPruner,
    FPGMPruner,
    L1NormPruner,
    L2NormPruner,
    LevelPruner,
    LinearPruner,
    MovementPruner,
    SlimPruner,
    TaylorPruner,
)
from slimkit.faces.nni.v3.speedup import ModelSpeedup
from slimkit.faces.nni.v3.utils import auto_set_denpendency_group_ids
from tests.faces.nni.digits import accuracy, kept_channels
from tests.faces.nni.v3.loop import layer_sparsity, make_evaluator, make_training_func, training_step

DUMMY = torch.randn(2, 1, 8, 8)


@pytest.mark.parametrize("pruner_class", [L1NormPruner, L2NormPruner, FPGMPruner])
def test_norm_pruners_reach_the_ratio_and_the_speedup_removes_the_channels(cnn, digits, pruner_class):
    flops_before, _, _ = count_flops_params(cnn, DUMMY, verbose=False)
    pruner = pruner_class(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}])
    _, masks = pruner.compress()
    assert sorted(masks) == ["conv1", "conv2"]
    for name, shapes in (("conv1", (16, 1, 3, 3)), ("conv2", (32, 16, 3, 3))):
        assert sorted(masks[name]) == ["bias", "weight"] and tuple(masks[name]["weight"].shape) == shapes
        assert len(kept_channels(masks[name]["weight"])) == shapes[0] // 2
        assert layer_sparsity(masks[name]["bias"]) == 0.5
    pruner.unwrap_model()  # NNI 3.0's spelling: the layers come back, the speedup applies the masks
    ModelSpeedup(cnn, DUMMY, masks).speedup_model()
    assert (cnn.conv1.out_channels, cnn.conv2.in_channels, cnn.conv2.out_channels, cnn.bn2.num_features) == \
        (8, 8, 16, 16)
    flops_after, _, _ = count_flops_params(cnn, DUMMY, verbose=False)
    assert flops_after < 0.6 * flops_before


def test_pruned_model_fine_tunes_back_with_the_evaluators_loop(cnn, digits, pretrained):
    pruner = L1NormPruner(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}])
    _, masks = pruner.compress()
    pruner._unwrap_model()
    ModelSpeedup(cnn, DUMMY, masks).speedup_model()
    optimizer = trace(torch.optim.Adam)(cnn.parameters(), lr=0.01)  # the model's parameters are new
    evaluator = TorchEvaluator(make_training_func(digits[0]), optimizer, training_step,
                               evaluating_func=lambda m: accuracy(m, digits[1]))
    evaluator.bind_model(cnn)
    evaluator.train(max_epochs=2)
    assert evaluator.evaluate() >= min(0.85, pretrained[1] - 0.05)


def test_level_pruner_selects_by_regex_and_excludes_by_name(cnn):
    config = [{"op_names_re": ["fc.*"], "op_types": ["Linear"], "exclude_op_names": ["fc2"], "sparse_ratio": 0.7}]
    _, masks = LevelPruner(cnn, config).compress()
    assert list(masks) == ["fc1"]
    assert layer_sparsity(masks["fc1"]["weight"]) == pytest.approx(0.7, abs=1e-3)


def test_a_global_group_ranks_its_layers_together_under_the_cap(cnn):
    config = [{"op_names": ["conv1"], "sparse_ratio": 0.5, "global_group_id": 0, "max_sparse_ratio": 0.9},
              {"op_names": ["conv2"], "sparse_ratio": 0.5, "global_group_id": 0, "max_sparse_ratio": 0.6}]
    pruner = L1NormPruner(cnn, config)
    _, masks = pruner.compress()
    assert pruner.mode == "global"
    sizes = {n: m["weight"].numel() for n, m in masks.items()}
    removed = sum(layer_sparsity(m["weight"]) * sizes[n] for n, m in masks.items())
    assert removed / sum(sizes.values()) == pytest.approx(0.5, abs=0.03)
    assert layer_sparsity(masks["conv2"]["weight"]) <= 0.6 + 1e-6
    assert layer_sparsity(masks["conv1"]["weight"]) != layer_sparsity(masks["conv2"]["weight"])


@pytest.mark.parametrize(("entry", "message"), [
    ({"op_types": ["Conv2d"], "sparse_ration": 0.5}, r"unknown key 'sparse_ration'. Did you mean 'sparse_ratio'.*"
                                                     r"op_names, op_names_re, op_types"),
    ({"op_types": ["Conv2d"], "sparse_threshold": 0.1}, "sparse_threshold.*give 'sparse_ratio'"),
    ({"op_types": ["Conv2d"], "sparse_ratio": 0.5, "target_names": ["_output_"]},
     "without an 'align' setting.*prune the layer's 'weight'"),
    ({"op_types": ["Conv2d"], "sparse_ratio": 0.5, "granularity": "in_channel"}, "granularity.*'out_channel'"),
    ({"op_types": ["Conv2d"], "sparse_ratio": 1.5}, r"sparse_ratio'\] must be a number in \[0, 1\)"),
    ({"op_names": ["conv9"], "sparse_ratio": 0.5}, "'conv9' is no layer.*'conv1'"),
])
def test_bad_3_0_keys_are_refused_naming_the_valid_ones(cnn, entry, message):
    with pytest.raises(PruningConfigError, match=message):
        L1NormPruner(cnn, [entry])


def test_slim_pruner_trains_the_steps_with_the_penalty_then_prunes_batchnorm(cnn, digits):
    losses = []
    evaluator = make_evaluator(cnn, digits, losses=losses)
    gamma_before = cnn.bn1.weight.detach().abs().sum()
    pruner = SlimPruner(cnn, [{"op_types": ["BatchNorm2d"], "sparse_ratio": 0.5}], evaluator, training_steps=6,
                        regular_scale=0.05)
    _, masks = pruner.compress()
    assert len(losses) == 6 and evaluator.steps_taken == 6 and evaluator.model is None
    assert {n: layer_sparsity(m["weight"]) for n, m in masks.items()} == {"bn1": 0.5, "bn2": 0.5}
    assert float(cnn.bn1.module.weight.detach().abs().sum()) != float(gamma_before)
    pruner._unwrap_model()
    ModelSpeedup(cnn, DUMMY, masks).speedup_model()
    assert (cnn.conv1.out_channels, cnn.conv2.out_channels) == (8, 16)


def test_slim_pruner_given_convs_as_in_nni_3_0_ranks_the_batchnorms_after_them(cnn, digits):
    config = [{"op_types": ["Conv2d"], "sparse_ratio": 0.25}]
    with pytest.raises(PruningConfigError, match="select the BatchNorm layers.*dummy_input"):
        SlimPruner(cnn, config, make_evaluator(cnn, digits), training_steps=2)
    evaluator = make_evaluator(cnn, digits, dummy_input=DUMMY)
    _, masks = SlimPruner(cnn, config, evaluator, training_steps=2).compress()
    assert {n: layer_sparsity(m["weight"]) for n, m in masks.items()} == {"bn1": 0.25, "bn2": 0.25}
    with pytest.raises(PruningConfigError, match="'fc1' is followed by no BatchNorm"):
        SlimPruner(cnn, [{"op_names": ["fc1"], "sparse_ratio": 0.5}], evaluator, training_steps=2)


def test_slim_pruner_refuses_an_evaluator_that_is_a_function(cnn):
    with pytest.raises(PruningConfigError, match="NNI 3.0.s evaluator form.*SlimPruner"):
        SlimPruner(cnn, [{"op_types": ["BatchNorm2d"], "sparsity": 0.5}], evaluator=lambda m: 1.0)


def test_taylor_pruner_collects_gradients_over_the_evaluators_steps(cnn, digits):
    losses = []
    evaluator = make_evaluator(cnn, digits, losses=losses)
    pruner = TaylorPruner(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.25}], evaluator, training_steps=4)
    _, masks = pruner.compress()
    assert len(losses) == 4
    assert all(w.contribution_batches == 4 for w in pruner.get_modules_wrapper())
    assert {n: len(kept_channels(m["weight"])) for n, m in masks.items()} == {"conv1": 12, "conv2": 24}
    with pytest.raises(PruningConfigError, match="needs an evaluator"):
        TaylorPruner(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.25}], None, 4)


@pytest.mark.parametrize(("scheduler", "first_round"), [(AGPPruner, 1 - (1 - 1 / 3) ** 3), (LinearPruner, 1 / 3)])
def test_scheduled_pruners_raise_the_bound_pruners_sparsity_round_by_round(cnn, digits, scheduler, first_round):
    losses = []
    evaluator = make_evaluator(cnn, digits, losses=losses)
    sub = TaylorPruner(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}], evaluator, training_steps=2)
    rounds = []
    original = sub.compress

    def record():
        result = original()
        rounds.append({n: layer_sparsity(m["weight"]) for n, m in result[1].items()})
        return result

    sub.compress = record
    pruner = scheduler(sub, interval_steps=3, total_times=3)
    _, masks = pruner.compress(max_steps=9, max_epochs=None)
    assert len(losses) == 9  # 3 rounds of 3 steps: 2 Taylor steps + 1 fine-tuning step each
    assert rounds[0]["conv2"] == pytest.approx(int(first_round * 0.5 * 32) / 32)
    assert [r["conv2"] for r in rounds] == sorted(r["conv2"] for r in rounds)
    assert {n: layer_sparsity(m["weight"]) for n, m in masks.items()} == {"conv1": 0.5, "conv2": 0.5}
    pruner.unwrap_model()
    assert isinstance(cnn.conv1, nn.Conv2d)
    with pytest.raises(PruningConfigError, match="shorter than interval_steps"):
        scheduler(TaylorPruner(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}], evaluator, 2), 3, 3
                  ).compress(max_steps=4, max_epochs=None)


def test_movement_pruner_prunes_while_the_evaluator_trains(cnn, digits):
    losses = []
    evaluator = make_evaluator(cnn, digits, losses=losses)
    pruner = MovementPruner(cnn, [{"op_types": ["Linear"], "op_names": ["fc1"], "sparse_ratio": 0.8}], evaluator,
                            warmup_step=2, cooldown_begin_step=8)
    with pytest.raises(PruningConfigError, match="needs a training duration"):
        pruner.compress()
    _, masks = pruner.compress(max_steps=10, max_epochs=None)
    assert len(losses) == 10 and pruner.step_count == 10
    assert list(masks) == ["fc1"] and layer_sparsity(masks["fc1"]["weight"]) == pytest.approx(0.8, abs=1e-3)


def test_out_channel_granularity_prunes_whole_rows_or_is_refused(cnn, digits):
    config = [{"op_names": ["fc1"], "sparse_ratio": 0.5, "granularity": "out_channel"}]
    pruner = MovementPruner(cnn, config, make_evaluator(cnn, digits), warmup_step=1, cooldown_begin_step=3)
    _, masks = pruner.compress(max_steps=4, max_epochs=None)
    rows = masks["fc1"]["weight"].any(dim=1)
    assert int(rows.sum()) == 32 and bool((masks["fc1"]["weight"][rows] == 1).all())
    pruner._unwrap_model()
    with pytest.raises(PruningConfigError, match="LevelPruner prunes single weights.*L1NormPruner"):
        LevelPruner(cnn, config)


class Residual(nn.Module):
    """conv0 feeds a block whose output is added back to it: conv0 and conv2 share channels."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0, self.conv1, self.conv2 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1), \
            nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8 * 64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv0(x))
        x = x + self.conv2(torch.relu(self.conv1(x)))
        return self.head(torch.flatten(x, 1))


def test_dependency_groups_give_coupled_layers_one_channel_choice():
    torch.manual_seed(0)
    model = Residual()
    config = auto_set_denpendency_group_ids(model, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}], DUMMY)
    ids = {c["op_names"][0]: c.get("dependency_group_id") for c in config}
    assert ids["conv0"] is not None and ids["conv0"] == ids["conv2"] and ids["conv1"] is None
    pruner = L1NormPruner(model, config)
    _, masks = pruner.compress()
    assert pruner.mode == "dependency_aware"
    assert kept_channels(masks["conv0"]["weight"]) == kept_channels(masks["conv2"]["weight"])
    assert len(kept_channels(masks["conv0"]["weight"])) == 4
    pruner._unwrap_model()
    ModelSpeedup(model, DUMMY, masks).speedup_model()
    assert (model.conv0.out_channels, model.conv1.out_channels, model.conv2.out_channels) == (4, 4, 4)
    assert model(DUMMY).shape == (2, 10)
    with pytest.raises(PruningConfigError, match="auto_set_denpendency_group_ids"):
        L1NormPruner(Residual(), [{"op_types": ["Conv2d"], "sparse_ratio": 0.5, "dependency_group_id": 1}])
