"""NNI 2.x's scheduler-style search pruners (SimulatedAnnealing, AutoCompress, AMC): signatures, results, errors."""

from __future__ import annotations

import pytest
import torch

import slimkit
from slimkit.compression import AMCPruner, AutoCompressPruner, SimulatedAnnealingPruner, count_flops_params
from slimkit.engines.pruning import AMCEngine
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.evaluation import count_macs
from slimkit.zoo import digits_split
from tests.faces.nni.v2.test_v2_face import Net, _trainer

CONFIG = [{"op_types": ["Conv2d"], "total_sparsity": 0.5, "max_sparsity_per_layer": 0.8}]


@pytest.fixture
def net() -> Net:
    torch.manual_seed(0)
    return Net().eval()


@pytest.fixture(scope="module")
def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y, _, _ = digits_split()
    return [(x[i:i + 64], y[i:i + 64]) for i in range(0, 256, 64)]


def _accuracy(batches):
    def evaluator(model):
        model.eval()
        with torch.no_grad():
            return sum(float((model(x).argmax(1) == y).float().mean()) for x, y in batches) / len(batches)

    return evaluator


def _conv_sparsity(masks) -> float:
    kept = sum(float(masks[n]["weight"].sum()) for n in ("conv1", "conv2"))
    return 1.0 - kept / sum(masks[n]["weight"].numel() for n in ("conv1", "conv2"))


def test_simulated_annealing_scheduler(net, batches):
    tuned = []
    x = batches[0][0][:1]
    pruner = SimulatedAnnealingPruner(net, CONFIG, evaluator=_accuracy(batches), cool_down_rate=0.5,
                                      pruning_algorithm="l1", finetuner=tuned.append, speedup=True, dummy_input=x)
    with pytest.raises(PruningConfigError, match=r"get_best_result\(\) before compress\(\)"):
        pruner.get_best_result()
    assert pruner.compress() is None
    with pytest.raises(PruningConfigError, match=r"compress\(\) already ran"):
        pruner.compress()
    task_id, model, masks, score, config_list = pruner.get_best_result()
    assert task_id == len(pruner.engine.history) > 0 and tuned == [model]  # the chosen allocation fine-tuned once
    assert score == pytest.approx(_accuracy(batches)(model))
    assert _conv_sparsity(masks) >= 0.5
    for entry in config_list:  # NNI 2.x's per-layer config of the best task, each layer within its cap
        assert set(entry) == {"op_names", "total_sparsity"} and entry["total_sparsity"] <= 0.8
    for name in ("conv1", "conv2"):  # sped up: the pruned filters are gone
        kept = int(masks[name]["weight"].reshape(masks[name]["weight"].shape[0], -1).any(1).sum())
        assert model.get_submodule(name).out_channels == kept < Net().get_submodule(name).out_channels


def test_auto_compress_scheduler(net, batches):
    x = batches[0][0][:1]
    admm_params = {"trainer": _trainer(batches[:1]), "criterion": torch.nn.CrossEntropyLoss(), "iterations": 1,
                   "training_epochs": 1,
                   "traced_optimizer": slimkit.trace(torch.optim.SGD)(net.parameters(), lr=0.01, momentum=0.9)}
    sa_params = {"evaluator": _accuracy(batches[:1]), "pruning_algorithm": "l1", "cool_down_rate": 0.3}
    pruner = AutoCompressPruner(net, CONFIG, 2, admm_params, sa_params, keep_intermediate_result=True,
                                speedup=True, dummy_input=x)
    assert pruner.engine.num_iterations == 2 and pruner.engine.admm_num_iterations == 1
    pruner.compress()
    _, model, masks, score, _ = pruner.get_best_result()
    assert _conv_sparsity(masks) >= 0.5 and len(pruner.engine.residuals) == 2
    assert model.conv2.out_channels < 16 and model(x).shape == (1, 10)
    assert score == pytest.approx(_accuracy(batches[:1])(model))


def test_amc_scheduler(net, batches):
    x = batches[0][0][:1]
    base = count_macs(Net(), x)
    ddpg = {"hidden1": 8, "hidden2": 8, "warmup": 2, "bsize": 4, "lr_c": 1e-3, "lr_a": 1e-4, "window_length": 1}
    with pytest.warns(UserWarning) as caught:  # NNI 2.x's config selects the output layer too; window_length is moot
        pruner = AMCPruner(3, net, [{"op_types": ["Conv2d", "Linear"], "total_sparsity": 0.5,
                                     "max_sparsity_per_layer": 0.8}], x, _accuracy(batches),
                           ddpg_params=ddpg, target="flops")
    assert {"window_length" in str(w.message) or "leaves ['fc2'] unpruned" in str(w.message) for w in caught} == {True}
    assert isinstance(pruner.engine, AMCEngine) and pruner.engine.flops_ratio == 0.5 and len(caught) == 2
    assert pruner.engine.train_episode == 3 and pruner.engine.lbound == pytest.approx(0.2)
    pruner.compress()
    _, model, masks, score, _ = pruner.get_best_result()
    assert len(pruner.engine.history) == 3 and "fc2" not in masks
    assert count_macs(model, x) <= 0.5 * base * 1.001  # always sped up: the FLOPs target holds on the small model
    assert count_flops_params(model, x, verbose=False)[0] < count_flops_params(Net(), x, verbose=False)[0]
    assert model.fc2.out_features == 10 and score == pytest.approx(_accuracy(batches)(model))


@pytest.mark.parametrize(("build", "message"), [
    (lambda m, x: SimulatedAnnealingPruner(m, CONFIG), "needs evaluator=fn"),
    (lambda m, x: SimulatedAnnealingPruner(m, CONFIG, lambda _: 1.0, pruning_algorithm="taylorfo"),
     "pruning_algorithm 'taylorfo' is not one .* Choose one of level, l1, l2, fpgm"),
    (lambda m, x: SimulatedAnnealingPruner(m, CONFIG, lambda _: 1.0, pruning_params={"mode": "x"}),
     r"pruning_params \['mode'\]"),
    (lambda m, x: SimulatedAnnealingPruner(m, CONFIG, lambda _: 1.0, speedup=True), "needs dummy_input"),
    (lambda m, x: SimulatedAnnealingPruner(m, [{"op_types": ["Conv2d"], "total_sparsity": 0.5,
                                                "max_sparsity_per_layer": {"conv1": 0.5}}], lambda _: 1.0),
     "one entry per layer"),
    (lambda m, x: SimulatedAnnealingPruner(m, "conv1", lambda _: 1.0), "config_list must be a list of dicts"),
    (lambda m, x: AMCPruner(2, m, CONFIG, x, lambda _: 1.0, target="params"), "budgets FLOPs"),
    (lambda m, x: AMCPruner(2, m, [{"op_types": ["Conv2d"]}], x, lambda _: 1.0), "needs 'total_sparsity'"),
    (lambda m, x: AMCPruner(2, m, CONFIG, None, lambda _: 1.0), "needs dummy_input"),
    (lambda m, x: AMCPruner(2, m, CONFIG, x, lambda _: 1.0, ddpg_params={"hidden": 3}), r"unknown keys \['hidden'\]"),
    (lambda m, x: AutoCompressPruner(m, CONFIG, 1, {"trainer": print}, {"evaluator": lambda _: 1.0}),
     "needs traced_optimizer="),
    (lambda m, x: AutoCompressPruner(m, CONFIG, 1, {"trainer": print, "criterion": print, "granularity": "fine-grained",
                                                    "traced_optimizer": torch.optim.SGD(m.parameters(), lr=0.1)},
                                     {"evaluator": lambda _: 1.0, "pruning_algorithm": "l1"}),
     "granularity='fine-grained' disagrees with sa_params pruning_algorithm='l1'"),
    (lambda m, x: AutoCompressPruner(m, CONFIG, 1, {}, {"temperature": 3}), r"sa_params has unknown keys"),
])
def test_errors_name_the_argument(net, batches, build, message):
    with pytest.raises(PruningConfigError, match=message):
        build(net, batches[0][0][:1])
