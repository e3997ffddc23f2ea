"""Auptimizer's compression example experiments, as its files write them, on the digits CNN (tests/fixtures/auptimizer).

The fixtures are our own files reproducing the keys and calls of Auptimizer's
``Examples/compression/mnist_pytorch`` (its files are GPL-3.0, so none is copied): every experiment file validates,
and one-time and automatic runs complete with the model exported. Automatic runs use small budgets.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from slimkit.experiment import load_experiment, run_experiment

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "auptimizer"
FILES = sorted(p.name for p in FIXTURES.glob("exp_*.json"))
ONE_TIME = [f for f in FILES if not f.startswith("exp_auto_")]
AUTOMATIC = [f for f in FILES if f.startswith("exp_auto_")]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A copy of the fixtures with the pretrained digits model already cached (as Auptimizer ships its .pth)."""
    folder = tmp_path_factory.mktemp("auptimizer")
    for path in FIXTURES.iterdir():
        if path.suffix in (".py", ".json"):
            shutil.copy(path, folder / path.name)
    spec = importlib.util.spec_from_file_location("digits_net_fixture", folder / "digits_net.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.pretrained()
    return folder


def _small(workdir: Path, name: str, **changes) -> Path:
    exp = json.loads((workdir / name).read_text())
    exp.update(changes)
    path = workdir / f"small_{name}"
    path.write_text(json.dumps(exp))
    return path


def test_every_example_file_validates():
    assert len(ONE_TIME) == 26 and len(AUTOMATIC) == 18
    for name in FILES:
        exp = load_experiment(FIXTURES / name, automatic=name.startswith("exp_auto_"))
        assert exp.script is not None and exp.script.is_file()
        if name.startswith("exp_auto_"):
            assert exp.params and exp.save_model and exp.n_samples == 5 and exp.n_parallel == 4
        else:
            assert not exp.params
    spellings = {json.loads((FIXTURES / n).read_text())["compression"]["compressor"] for n in FILES}
    resolved = {load_experiment(FIXTURES / n, automatic="auto" in n).compression["compressor"] for n in FILES}
    assert {"activation_apoz_rank_filter", "activation_mean_rank_filter", "taylor_fo_weight_filter"} <= spellings
    assert {"activation_apoz_rank_filter", "taylor_fo_weight_filter", "naive"} <= resolved  # kept as written
    search = {"admm", "amc", "auto_compress", "lottery_ticket", "net_adapt", "sensitivity", "simulated_annealing"}
    assert search <= spellings and search <= resolved  # the search-driven pruners' examples
    auto_lottery = load_experiment(FIXTURES / "exp_auto_lottery_ticket.json", automatic=True)
    assert [p.name for p in auto_lottery.params] == ["config_list[0].prune_iterations", "config_list[0].sparsity"]
    auto_admm = load_experiment(FIXTURES / "exp_auto_admm.json", automatic=True)  # one sparsity per op name
    assert [p.name for p in auto_admm.params] == ["config_list[0].sparsity@conv1", "config_list[0].sparsity@conv2"]
    hyperband = load_experiment(FIXTURES / "exp_auto_fpgm_hyperband.json", automatic=True)
    assert hyperband.proposer_options == {"max_iter": 81, "eta": 3, "skip_last": 0, "engine": "random"}
    assert load_experiment(FIXTURES / "exp_auto_fpgm_bohb.json", automatic=True).proposer_options["num_samples"] == 4
    assert load_experiment(FIXTURES / "exp_auto_fpgm_sequence.json", automatic=True).params[0].grid() == [
        0.1, 0.3, 0.5, 0.7, 0.9]


def _check_one_time(result, name: str) -> None:
    (row,) = result.rows
    assert row["state"] == "complete", row.get("reason", "") + "\n" + row.get("log_tail", "")
    trial = result.folder / row["trial_dir"]
    log = (trial / "log.txt").read_text()
    assert "test_acc=" in log and "FLOPs total:" in log  # count_flops_params printed NNI's table
    assert -1.0 < row["result"] <= 0.0  # (accuracy - 1) / log(flops)


@pytest.mark.slow  # example files end to end (~6 s each); test_exp_runner runs a one-time script job in make test
@pytest.mark.parametrize("name", ["exp_l1filter.json", "exp_quantization_naive.json"])
def test_one_time_examples(workdir, name):
    result = run_experiment(workdir / name, automatic=False, quiet=True)
    _check_one_time(result, name)
    if name == "exp_quantization_naive.json":  # digits_no_speedup.py exports into the job folder with **config
        model = result.folder / result.rows[0]["trial_dir"] / "model"
        assert (model / "digits_compressed.safetensors").is_file()
        assert (model / "digits_compressed_mask.safetensors").is_file()  # the calibration (bits, scales)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ONE_TIME if n not in ("exp_l1filter.json",
                                                                   "exp_quantization_naive.json")])
def test_every_one_time_example(workdir, name):
    _check_one_time(run_experiment(workdir / name, automatic=False, quiet=True), name)


def _check_automatic(result, expect: int) -> None:
    states = [r["state"] for r in result.rows]
    assert len(states) == expect and "complete" in states and "failed" not in states, result.rows
    best = result.folder / result.rows[result.kept[0]]["trial_dir"] / "model"
    assert any(best.glob("digits_compressed*.safetensors"))  # save_model: the kept trial's model exported


@pytest.mark.slow
def test_automatic_example_hyperband(workdir):
    path = _small(workdir, "exp_auto_fpgm_hyperband.json", n_samples=2, n_parallel=1, max_iter=3, random_seed=0)
    _check_automatic(run_experiment(path, automatic=True, quiet=True), 2)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in AUTOMATIC if n != "exp_auto_fpgm_hyperband.json"])
def test_every_automatic_example(workdir, name):
    path = _small(workdir, name, n_samples=3, n_parallel=2, random_seed=0)
    _check_automatic(run_experiment(path, automatic=True, quiet=True), 3)
