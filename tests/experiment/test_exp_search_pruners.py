"""Issue 24's pruners on the experiment face: Auptimizer's compressor names and the calls its example scripts make.

Each case builds the compressor from an experiment block as Auptimizer's documentation writes it (names
``admm``, ``net_adapt``, ``simulated_annealing``, ``auto_compress``, ``amc``, ``lottery_ticket``, ``sensitivity``;
the keyword arguments of its example scripts), on the digits CNN with real digits, then compresses, removes the
pruned channels and exports.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from slimkit import zoo
from slimkit.engines import pruning
from slimkit.errors import ConfigError
from slimkit.evaluation import count_macs
from slimkit.experiment import get_compressor_spec, load_experiment, run_experiment
from slimkit.faces.auptimizer import create_compressor, load_compressed_model
from slimkit.faces.nni import v1 as nni_v1
from slimkit.zoo.digits_cnn import digits_split
from tests.experiment.test_exp_runner import _experiment

LAYERS = ["features.0", "features.4", "features.8"]


@pytest.fixture(scope="module")
def data():
    x_train, y_train, x_test, y_test = digits_split()
    train = [(x_train[i:i + 64], y_train[i:i + 64]) for i in range(0, 640, 64)]
    return train, (x_test, y_test)


def _block(name: str, config_list: list) -> dict:
    return {"compression": {"framework": "torch", "type": "pruning", "compressor": name, "config_list": config_list}}


def _accuracy(test):
    x, y = test

    def evaluate(model: nn.Module) -> float:
        with torch.no_grad():
            return float((model(x).argmax(1) == y).float().mean())

    return evaluate


def _trainer(train):
    def trainer(model, optimizer, criterion, epoch, callback=None):  # Auptimizer's short_term_fine_tuner
        model.train()
        for x, y in train:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            if callback:
                callback()
            optimizer.step()

    return trainer


def _speedup_and_export(compressor, tmp_path, conv_sparsity: float | None = None) -> nn.Module:
    model = compressor.apply_speedup(dummy_input=torch.rand(1, 1, 8, 8))
    for name in LAYERS:
        base = zoo.load("digits_cnn").model.get_submodule(name).out_channels
        out = model.get_submodule(name).out_channels
        assert out <= base
        if conv_sparsity is not None:
            assert out == base - int(conv_sparsity * base), name
    base_params = sum(p.numel() for p in zoo.load("digits_cnn").model.parameters())
    assert sum(p.numel() for p in model.parameters()) < base_params
    written = compressor.export_model("model.safetensors", "mask.safetensors", folder_name=tmp_path)
    again = load_compressed_model(zoo.load("digits_cnn").model, written["model"]).eval()
    x = torch.rand(4, 1, 8, 8)
    torch.testing.assert_close(again(x), model.eval()(x))
    return model


@pytest.mark.parametrize(("name", "engine"), [
    ("admm", "ADMMPruner"), ("net_adapt", "NetAdaptPruner"), ("simulated_annealing", "SimulatedAnnealingPruner"),
    ("auto_compress", "AutoCompressPruner"), ("amc", "AMCPruner"), ("lottery_ticket", "LotteryTicketPruner"),
    ("sensitivity", "SensitivityPruner"), ("movement", "MovementPruner")])
def test_names_resolve_to_one_algorithm(name, engine):
    assert get_compressor_spec(name, "pruning").name == name
    assert get_compressor_spec(engine).name == name
    nni1 = getattr(nni_v1, engine, None) or getattr(pruning, engine)  # NNI 1.x's class of that name, by path
    assert get_compressor_spec(name).engine is nni1


def test_admm_as_auptimizer_calls_it(data, tmp_path):
    train, test = data
    model = zoo.load("digits_cnn").model
    config = _block("admm", [{"sparsity": 0.5, "op_types": ["Conv2d"], "op_names": ["features.4"]},
                             {"sparsity": 0.5, "op_types": ["Conv2d"], "op_names": ["features.8"]}])
    compressor = create_compressor(model, config, trainer=_trainer(train), num_iterations=2, training_epochs=1,
                                   row=0.1)
    compressor.compress()
    model = compressor.apply_speedup(dummy_input=torch.rand(1, 1, 8, 8))
    assert (model.features[4].out_channels, model.features[8].out_channels) == (32, 64)


def test_net_adapt_and_simulated_annealing(data, tmp_path):
    train, test = data
    config = _block("net_adapt", [{"sparsity": 0.5, "op_types": ["Conv2d"]}])
    compressor = create_compressor(zoo.load("digits_cnn").model, config, short_term_fine_tuner=lambda m: None,
                                   evaluator=_accuracy(test), optimize_mode="maximize", sparsity_per_iteration=0.25)
    compressor.compress()
    assert compressor.engine.overall_sparsity(compressor.engine.allocation) >= 0.5
    _speedup_and_export(compressor, tmp_path / "na")
    config = _block("simulated_annealing", [{"sparsity": 0.5, "op_types": ["Conv2d"]}])
    compressor = create_compressor(zoo.load("digits_cnn").model, config, evaluator=_accuracy(test),
                                   optimize_mode="maximize", base_algo="l1", start_temperature=100,
                                   stop_temperature=20, cool_down_rate=0.5, perturbation_magnitude=0.35,
                                   experiment_data_dir=str(tmp_path / "sa"))
    compressor.compress()
    assert json.loads((tmp_path / "sa" / "search_result.json").read_text())["pruner"] == "SimulatedAnnealingPruner"
    _speedup_and_export(compressor, tmp_path / "sa")


def test_auto_compress_and_sensitivity(data, tmp_path):
    train, test = data
    config = _block("auto_compress", [{"sparsity": 0.5, "op_types": ["Conv2d"]}])
    compressor = create_compressor(zoo.load("digits_cnn").model, config, trainer=_trainer(train[:3]),
                                   evaluator=_accuracy(test), dummy_input=torch.rand(1, 1, 8, 8),
                                   optimize_mode="maximize", num_iterations=1, admm_num_iterations=1,
                                   admm_training_epochs=1, cool_down_rate=0.5)
    compressor.compress()
    _speedup_and_export(compressor, tmp_path / "ac")
    config = _block("sensitivity", [{"sparsity": 0.5, "op_types": ["Conv2d"]}])
    compressor = create_compressor(zoo.load("digits_cnn").model, config, evaluator=_accuracy(test),
                                   sparsity_per_iter=0.25)
    compressor.compress()
    assert len(compressor.engine.sensitivities) == 2
    _speedup_and_export(compressor, tmp_path / "sens")


def test_amc_as_auptimizer_calls_it(data, tmp_path):
    train, test = data
    config = _block("amc", [{"op_types": ["Conv2d", "Linear"]}, {"exclude": True, "op_names": ["classifier.3"]}])
    with pytest.warns(UserWarning, match="have no effect here"):
        compressor = create_compressor(
            zoo.load("digits_cnn").model, config, evaluator=lambda loader, model: _accuracy(test)(model),
            val_loader=train[:1], flops_ratio=0.5, model_type="mobilenetv2", n_calibration_batches=1,
            n_points_per_layer=1, warmup=1, hidden1=32, hidden2=32, train_episode=3, max_episode_length=1)
    compressor.compress()
    base = zoo.load("digits_cnn").model
    model = _speedup_and_export(compressor, tmp_path)
    x = torch.rand(1, 1, 8, 8)
    assert count_macs(model, x) <= 0.5 * count_macs(base, x) * 1.001


def test_lottery_ticket_as_auptimizer_calls_it(data, tmp_path):
    train, _ = data
    model = zoo.load("digits_cnn").model
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    config = _block("lottery_ticket", [{"prune_iterations": 2, "sparsity": 0.8, "op_types": ["Conv2d"]}])
    compressor = create_compressor(model, config, optimizer=optimizer, lr_scheduler=scheduler)
    model = compressor.compress()
    assert list(compressor.get_prune_iterations()) == [0, 1, 2]  # the compressor forwards Auptimizer's calls
    for _ in compressor.get_prune_iterations():
        compressor.prune_iteration_start()
        for x, y in train[:3]:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    for name in LAYERS:
        weight = model.get_submodule(name).module.weight
        assert abs(float((weight == 0).float().mean()) - 0.8) < 0.01  # unstructured: the paper's level masks
    assert compressor.engine.curr_prune_iteration == 2
    with pytest.raises(Exception, match="all 2 pruning rounds have run"):
        compressor.prune_iteration_start()


def test_sensitivity_compress_takes_eval_and_finetune_args(data):
    """Auptimizer's mnist_sensitivity.py: ``compressor.compress(eval_args=[model], finetune_args=[model])``."""
    test = (data[1][0][:200], data[1][1][:200])
    model = zoo.load("digits_cnn").model
    seen = {"eval": [], "finetune": []}

    def evaluator(m, scale=1.0):
        seen["eval"].append((m, scale))
        return _accuracy(test)(m) * scale

    def finetuner(m, steps):
        seen["finetune"].append((m, steps))

    config = _block("sensitivity", [{"sparsity": 0.4, "max_sparsity_per_layer": 0.5, "op_types": ["Conv2d"]}])
    compressor = create_compressor(model, config, finetuner=finetuner, evaluator=evaluator, sparsity_per_iter=0.2)
    out = compressor.compress(eval_args=[model], eval_kwargs={"scale": 2.0}, finetune_args=[model, 3])
    assert out is model and compressor.engine.overall_sparsity(compressor.engine.allocation) >= 0.4
    assert seen["eval"] and all(m is model and scale == 2.0 for m, scale in seen["eval"])
    assert seen["finetune"] == [(model, 3), (model, 3)]  # one short fine-tune per iteration (0.2 + 0.2)
    model.eval()
    assert compressor.engine.best_score == pytest.approx(2.0 * _accuracy(test)(model))  # eval_kwargs reached it


def test_compress_arguments_the_engine_does_not_take_are_refused():
    config = _block("l1_filter", [{"sparsity": 0.5, "op_types": ["Conv2d"]}])
    compressor = create_compressor(zoo.load("digits_cnn").model, config)
    with pytest.raises(ConfigError, match=r"compress\(eval_args=...\): 'l1_filter' \(L1FilterPruner\) takes no "
                                          "arguments"):
        compressor.compress(eval_args=[compressor.model])
    sensitivity = create_compressor(zoo.load("digits_cnn").model, _block("sensitivity", [{"sparsity": 0.5}]),
                                    evaluator=lambda m: 1.0)
    with pytest.raises(ConfigError, match="takes only eval_args, eval_kwargs, finetune_args, finetune_kwargs"):
        sensitivity.compress(evaluator_args=[1])
    quantizer = create_compressor(zoo.load("digits_cnn").model, {"compression": {
        "framework": "torch", "type": "quantization", "compressor": "int8_dynamic", "config_list": []}})
    with pytest.raises(ConfigError, match="runs through smash and its compress\\(\\) takes no arguments"):
        quantizer.compress(1)


ADMM_SCRIPT = """#!/usr/bin/env python
import sys

import torch

import slimkit
from slimkit import zoo

config = slimkit.BasicConfig().load(sys.argv[1])
model = zoo.load("digits_cnn").model
x_train, y_train, x, y = zoo.digits_split()

def trainer(model, criterion, optimizer, epoch, callback):
    model.train()
    for i in range(0, 320, 64):
        optimizer.zero_grad()
        loss = criterion(model(x_train[i:i + 64]), y_train[i:i + 64])
        loss.backward()
        if callback:
            callback()
        optimizer.step()

compressor = slimkit.create_compressor(model, config, trainer=trainer, num_iterations=2, training_epochs=1)
model = compressor.compress()
model = compressor.apply_speedup(dummy_input=torch.randn(1, 1, 8, 8))
with torch.no_grad():
    accuracy = float((model(x).argmax(-1) == y).float().mean())
compressor.export_model(model_path="model.safetensors", speedup=True, folder_name=config.folder_name)
slimkit.print_result(accuracy)
"""


@pytest.mark.slow  # a subprocess imports slimkit and trains: ~20-50 s on a shared 2-core box
def test_admm_experiment_file_runs_its_script(tmp_path):
    exp = _experiment(tmp_path, ADMM_SCRIPT, name="admm")
    data = json.loads(exp.read_text())
    data["compression"].update(compressor="admm", config_list=[{"sparsity": 0.5, "op_types": ["Conv2d"]}])
    exp.write_text(json.dumps(data))
    result = run_experiment(exp, automatic=False, quiet=True)
    (row,) = result.rows
    assert row["state"] == "complete" and 0.0 <= row["result"] <= 1.0
    assert (result.folder / row["trial_dir"] / "model" / "model.safetensors").is_file()


def test_unstructured_masks_are_not_sped_up():
    for name, kwargs, key in (("lottery_ticket", {}, "base_algo='level'"), ("movement", {}, "granularity='fine'"),
                              ("admm", {"base_algo": "level"}, "base_algo='level'")):
        refusal = get_compressor_spec(name).speedup_refusal(kwargs)
        assert refusal is not None and key in refusal and "nothing to remove" in refusal, name
    assert get_compressor_spec("lottery_ticket").speedup_refusal({"base_algo": "l1"}) is None
    assert get_compressor_spec("movement").speedup_refusal({"granularity": "filter"}) is None
    assert get_compressor_spec("net_adapt").speedup_refusal({}) is None


#: the compression blocks of Auptimizer's example experiments for these compressors (Examples/compression)
AUPTIMIZER_BLOCKS = {
    "exp_admm": ("admm", [{"sparsity": 0.5, "op_types": ["Conv2d"], "op_names": ["conv1"]},
                          {"sparsity": 0.5, "op_types": ["Conv2d"], "op_names": ["conv2"]}], False),
    "exp_auto_admm": ("admm", [{"sparsity": {"range": [0.1, 0.9], "type": "float"}, "op_names": ["conv1", "conv2"],
                                "op_types": ["Conv2d"]}], True),
    "exp_net_adapt": ("net_adapt", [{"sparsity": 0.5, "op_types": ["Conv2d"]}], False),
    "exp_sensitivity": ("sensitivity", [{"sparsity": 0.5, "op_types": ["Conv2d"]}], False),
    "exp_simulated_annealing": ("simulated_annealing", [{"sparsity": 0.5, "op_types": ["Conv2d"]}], False),
    "exp_autocompress": ("auto_compress", [{"sparsity": 0.5, "op_types": ["Conv2d"]}], False),
    "exp_amc": ("amc", [{"op_types": ["Conv2d", "Linear"]}], False),
    "exp_lottery_ticket": ("lottery_ticket", [{"prune_iterations": 5, "sparsity": 0.8, "op_types": ["Conv2d"]}],
                           False),
    "exp_auto_lottery_ticket": ("lottery_ticket", [{"prune_iterations": {"range": [1, 10], "type": "int"},
                                                    "sparsity": {"range": [0.1, 0.9], "type": "float"},
                                                    "op_types": ["Conv2d"]}], True),
}


@pytest.mark.parametrize("name", sorted(AUPTIMIZER_BLOCKS))
def test_auptimizer_example_experiments_validate(name, tmp_path):
    compressor, config_list, automatic = AUPTIMIZER_BLOCKS[name]
    (tmp_path / "mnist.py").write_text("print('#Auto: result=1.0')\n")
    exp = {"name": name, "script": "mnist.py", "resource": "cpu", **_block(compressor, config_list)}
    if automatic:
        exp.update(proposer="random", n_parallel=4, target="max", n_samples=5, resource_args={"save_model": True})
    (tmp_path / f"{name}.json").write_text(json.dumps(exp))
    loaded = load_experiment(tmp_path / f"{name}.json", automatic=automatic)
    assert loaded.compression["compressor"] == compressor
    # auto_admm: one sparsity per op name (expand_op_names); auto_lottery_ticket: prune_iterations and sparsity
    assert len(loaded.params) == (2 if automatic else 0)
