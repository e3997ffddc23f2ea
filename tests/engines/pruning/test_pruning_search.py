"""Search-driven pruners (issue 24): allocation, simulated annealing, NetAdapt, sensitivity, AMC and its parts."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from slimkit.engines.pruning import (
    AMCEngine,
    ChannelMacs,
    DDPGAgent,
    NetAdaptPruner,
    PruningConfigError,
    SensitivityPruner,
    SimulatedAnnealingEngine,
)
from slimkit.engines.pruning.sensitivity import tolerances
from slimkit.engines.speedup import ModelSpeedup
from slimkit.evaluation import count_macs
from slimkit.zoo.digits_cnn import DigitsCNN

CONV = [{"sparsity": 0.5, "op_types": ["Conv2d"]}]


def _accuracy(batches):
    def evaluate(model: nn.Module) -> float:
        with torch.no_grad():
            return sum(float((model(x).argmax(1) == y).float().mean()) for x, y in batches) / len(batches)

    return evaluate


def _weight_sparsity(pruner) -> float:
    masks = pruner.get_masks()
    return sum(float((m["weight_mask"] == 0).sum()) for m in masks.values()) / sum(
        m["weight_mask"].numel() for m in masks.values())


def test_scale_to_target_hits_target_with_caps(convnet, digit_batches):
    pruner = SimulatedAnnealingEngine(convnet, [{"sparsity": 0.6, "op_types": ["Conv2d"],
                                                 "max_sparsity_per_layer": 0.7}], _accuracy(digit_batches))
    allocation = pruner.scale_to_target({"conv1": 1.0, "conv2": 0.0})  # conv2 has no share: conv1 alone cannot
    assert allocation["conv1"] == pytest.approx(5 / 8)  # 5 of 8 filters: its cap 0.7 allows no more
    assert pruner.overall_sparsity(allocation) >= 0.6  # conv2 takes the rest although its share was 0
    allocation = pruner.scale_to_target({"conv1": 1.0, "conv2": 1.0})
    assert 0.6 <= pruner.overall_sparsity(allocation) < 0.6 + 1 / 16
    assert all(s * units == int(s * units) for s, units in zip(allocation.values(), (8, 16), strict=True))


def test_allocation_errors(convnet, digit_batches):
    evaluate = _accuracy(digit_batches)
    with pytest.raises(PruningConfigError, match="one overall sparsity"):
        SimulatedAnnealingEngine(convnet, [{"sparsity": 0.5, "op_names": ["conv1"]},
                                           {"sparsity": 0.3, "op_names": ["conv2"]}], evaluate)
    with pytest.raises(PruningConfigError, match="base_algo must be one of l1, l2, fpgm, level"):
        SimulatedAnnealingEngine(convnet, CONV, evaluate, base_algo="taylor")
    with pytest.raises(PruningConfigError, match="needs evaluator"):
        SimulatedAnnealingEngine(convnet, CONV)
    with pytest.raises(PruningConfigError, match="start_temperature .* must be above stop_temperature"):
        SimulatedAnnealingEngine(convnet, CONV, evaluate, start_temperature=10, stop_temperature=20)
    pruner = SimulatedAnnealingEngine(convnet, [{"sparsity": 0.8, "op_types": ["Conv2d"],
                                                 "max_sparsity_per_layer": 0.5}], evaluate)
    with pytest.raises(PruningConfigError, match="cannot be reached"):
        pruner.compress()
    pruner.unwrap_model()
    bad = SimulatedAnnealingEngine(convnet, CONV, lambda model: "good")
    with pytest.raises(PruningConfigError, match="must return a finite number"):
        bad.compress()


def test_simulated_annealing_search(convnet, digit_batches, tmp_path):
    pruner = SimulatedAnnealingEngine(convnet, CONV, _accuracy(digit_batches), cool_down_rate=0.7,
                                      experiment_data_dir=tmp_path, seed=3)
    pruner.compress()
    steps = 1 + sum(1 for k in range(100) if 100 * 0.7**k > 20)  # the start, then one candidate per temperature
    assert len(pruner.history) == steps
    assert all(0.5 <= h["sparsity"] < 0.5 + 1 / 16 for h in pruner.history)
    assert pruner.best_score == max(h["metric"] for h in pruner.history)
    assert pruner.best_score >= pruner.history[0]["metric"]
    assert _weight_sparsity(pruner) == pytest.approx(pruner.overall_sparsity(pruner.allocation))
    written = json.loads((tmp_path / "search_result.json").read_text())
    assert written["allocation"] == pruner.allocation and len(written["history"]) == steps
    model = pruner.unwrap_model(apply_masks=True)
    assert [int((model.get_submodule(n).weight.flatten(1).abs().sum(1) == 0).sum()) for n in ("conv1", "conv2")] \
        == [round(pruner.allocation["conv1"] * 8), round(pruner.allocation["conv2"] * 16)]


def test_simulated_annealing_is_seeded(digit_batches):
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = DigitsCNN().eval()
        pruner = SimulatedAnnealingEngine(model, CONV, _accuracy(digit_batches), cool_down_rate=0.5, seed=7)
        pruner.compress()
        runs.append(pruner.allocation)
    assert runs[0] == runs[1]


def test_net_adapt_prunes_one_layer_per_proposal(convnet, digit_batches):
    calls = []
    pruner = NetAdaptPruner(convnet, CONV, lambda model: calls.append(1), _accuracy(digit_batches),
                            sparsity_per_iteration=0.05)
    pruner.compress()
    proposals = pruner.history
    assert len(calls) == len(proposals) and len(proposals) >= 3
    assert pruner.overall_sparsity(pruner.allocation) >= 0.5
    current = {"conv1": 0.0, "conv2": 0.0}
    for iteration in sorted({p["iteration"] for p in proposals}):
        mine = [p for p in proposals if p["iteration"] == iteration]
        for p in mine:
            changed = [n for n in current if p["allocation"][n] != current[n]]
            assert changed == [p["layer"]]
        current = max(mine, key=lambda p: p["metric"])["allocation"]
    assert current == pytest.approx(pruner.allocation, abs=1e-6)


def test_sensitivity_pruner_follows_tolerances(convnet, digit_batches, tmp_path):
    assert tolerances(0.9, 0.05, {"a": {0.1: 0.9, 0.5: 0.86, 0.9: 0.2}, "b": {0.1: 0.5}}) == {"a": 0.5, "b": 0.0}
    seen = []

    def proportions(baseline, threshold, sensitivities):
        seen.append(sensitivities)
        return {"conv1": 0.0, "conv2": 1.0}

    pruner = SensitivityPruner(convnet, CONV, _accuracy(digit_batches), sparsity_per_iter=0.3,
                               sparsity_proportion_calc=proportions, checkpoint_dir=tmp_path)
    pruner.compress(eval_args=[convnet])
    assert len(seen) == 2 and set(seen[0]) == {"conv1", "conv2"} and sorted(seen[0]["conv1"]) == [
        0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    assert pruner.allocation == {"conv1": 0.0, "conv2": 9 / 16}  # all the shares went to conv2
    assert pruner.overall_sparsity(pruner.allocation) >= 0.5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iteration_1_masks.safetensors",
                                                          "iteration_2_masks.safetensors"]


def test_channel_macs_match_the_speedup():
    torch.manual_seed(0)
    model, x = DigitsCNN().eval(), torch.rand(2, 1, 8, 8)
    counter = ChannelMacs(model, x)
    assert counter.total == count_macs(model, x)
    keep = {"features.0": 0.5, "features.4": 0.75, "features.8": 0.25, "classifier.1": 0.5}
    masks = {}
    for name, frac in keep.items():
        out = model.get_submodule(name).weight.shape[0]
        masks[name] = {"out_channels": torch.arange(int(out * frac))}
    small = ModelSpeedup(model, x, masks).speedup_model()
    assert counter.macs(keep) == pytest.approx(count_macs(small, x))


def test_ddpg_agent_learns_a_one_step_bandit():
    agent = DDPGAgent(2, hidden1=32, hidden2=32, lr_actor=1e-2, lr_critic=1e-2, batch_size=32, seed=0)
    for episode in range(300):
        state = [1.0, 0.0]
        action = agent.random_action() if episode < 50 else agent.explore(state, 0.3 * 0.99**episode)
        agent.remember(state, action, -(action - 0.7) ** 2, state, True)
        agent.update()
    assert agent.policy([1.0, 0.0]) == pytest.approx(0.7, abs=0.1)


def test_amc_meets_the_budget_after_speedup(digit_batches):
    torch.manual_seed(0)
    model, x = DigitsCNN().eval(), digit_batches[0][0]
    base_macs = count_macs(model, x)
    config = [{"op_types": ["Conv2d"]}, {"op_names": ["classifier.1"]}]
    with pytest.warns(UserWarning, match="model_type"):
        pruner = AMCEngine(model, config, lambda loader, m: _accuracy(loader)(m), digit_batches, flops_ratio=0.4,
                           warmup=5, train_episode=12, hidden1=16, hidden2=16, bsize=8, channel_round=4,
                           model_type="mobilenetv2")
    pruner.compress()
    assert len(pruner.history) == 12
    assert all(h["macs"] <= 0.4 * base_macs * (1 + 1e-6) for h in pruner.history)
    masks = pruner.get_masks()
    model = pruner.unwrap_model(apply_masks=True)
    small = ModelSpeedup(model, x, masks).speedup_model()
    assert count_macs(small, x) == pytest.approx(pruner.best_macs)
    assert count_macs(small, x) <= 0.4 * base_macs * (1 + 1e-6)
    for name in ("features.0", "features.4", "features.8", "classifier.1"):
        kept = small.get_submodule(name).weight.shape[0]
        assert kept % 4 == 0 and kept >= 0.2 * model.get_submodule(name).weight.shape[0]


def test_amc_errors(convnet, digit_batches):
    evaluate = _accuracy(digit_batches)
    with pytest.raises(PruningConfigError, match="unexpected arguments"):
        AMCEngine(convnet, CONV, evaluate, dummy_input=digit_batches[0][0], flop_ratio=0.5)
    with pytest.raises(PruningConfigError, match="counts MACs on an example input"):
        AMCEngine(convnet, CONV, evaluate)
    with pytest.raises(PruningConfigError, match="flops_ratio must be a number"):
        AMCEngine(convnet, CONV, evaluate, dummy_input=digit_batches[0][0], flops_ratio=1.5)
    with pytest.raises(PruningConfigError, match="not 'level'"):
        AMCEngine(convnet, CONV, evaluate, dummy_input=digit_batches[0][0], base_algo="level")


def test_amc_leaves_the_output_layer_unpruned(digit_batches):
    """Auptimizer's exp_amc selects ``op_types: [Conv2d, Linear]``: the classifier's outputs are the classes."""
    model, x = DigitsCNN().eval(), digit_batches[0][0]
    with pytest.warns(UserWarning, match=r"leaves \['classifier.3'\] unpruned"):
        pruner = AMCEngine(model, [{"op_types": ["Conv2d", "Linear"]}], _accuracy(digit_batches), dummy_input=x,
                           flops_ratio=0.5, warmup=1, train_episode=1, hidden1=8, hidden2=8)
    assert pruner.layer_names == ["features.0", "features.4", "features.8", "classifier.1"]
    pruner.compress()
    assert set(pruner.get_masks()) == set(pruner.layer_names)
    with pytest.raises(PruningConfigError, match="none of the selected layers \\['classifier.3'\\]"), \
            pytest.warns(UserWarning):
        AMCEngine(DigitsCNN(), [{"op_names": ["classifier.3"]}], _accuracy(digit_batches), dummy_input=x)
