"""The hyperband, bohb and spearmint proposers: Optuna's samplers and pruner, Auptimizer's fields, budgets."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from slimkit.experiment import load_experiment, run_experiment
from slimkit.experiment.proposers import default_n_samples
from slimkit.experiment.study import make_pruner, make_sampler

# A plain-Python script: its value rises with the epoch and peaks at sparsity 0.6; every epoch is reported.
SCRIPT = """import json, sys
config = json.load(open(sys.argv[1]))
s = config["config_list"][0]["sparsity"]
budget = int(config.get("n_iterations", 3))  # hyperband/bohb give the most steps a trial may run
print("budget", budget, flush=True)
for step in range(1, budget + 1):
    print('#Auto: intermediate={"step": %d, "value": %r}' % (step, -(s - 0.6) ** 2 * (1 + 1.0 / step)), flush=True)
print("#Auto: result=%r" % (-(s - 0.6) ** 2))
"""


def _experiment(tmp_path: Path, proposer: str, **fields) -> Path:
    (tmp_path / "job.py").write_text(SCRIPT)
    exp = {"name": f"p_{proposer}", "script": "job.py", "proposer": proposer, "target": "max", "random_seed": 2,
           "compression": {"framework": "torch", "type": "pruning", "compressor": "fpgm",
                           "config_list": [{"sparsity": {"range": [0.1, 0.9], "type": "float"},
                                            "op_types": ["Conv2d"]}]}}
    exp.update(fields)
    path = tmp_path / f"{proposer}.json"
    path.write_text(json.dumps(exp))
    return path


@pytest.mark.parametrize(("proposer", "fields", "sampler"), [
    ("hyperband", {"max_iter": 9, "n_samples": 8}, optuna.samplers.RandomSampler),
    ("bohb", {"min_budget": 1, "max_budget": 9, "num_samples": 4, "n_samples": 8}, optuna.samplers.TPESampler),
])
def test_multi_fidelity_proposers_prune_lagging_trials(tmp_path, proposer, fields, sampler):
    exp = load_experiment(_experiment(tmp_path, proposer, **fields), automatic=True)
    assert isinstance(make_sampler(exp), sampler) and isinstance(make_pruner(exp), optuna.pruners.HyperbandPruner)
    assert exp.track_intermediate_results
    result = run_experiment(exp.path, automatic=True, quiet=True)
    states = [r["state"] for r in result.rows]
    assert len(states) == 8 and "pruned" in states and "complete" in states and "failed" not in states
    log = (result.folder / result.rows[0]["trial_dir"] / "log.txt").read_text()
    assert "budget 9" in log  # the job config's n_iterations: the most steps a trial may run
    best = max((r for r in result.rows if r["state"] == "complete"), key=lambda r: r["result"])
    assert result.kept == [best["number"]]


def test_spearmint_is_gaussian_process_optimisation(tmp_path):
    path = _experiment(tmp_path, "spearmint", n_samples=5, engine="GPEIOptChooser", grid_size=1000)
    exp = load_experiment(path, automatic=True)
    assert isinstance(make_sampler(exp), optuna.samplers.GPSampler)
    assert isinstance(make_pruner(exp), optuna.pruners.NopPruner)
    result = run_experiment(path, automatic=True, quiet=True, folder=tmp_path / "out")
    assert [r["state"] for r in result.rows] == ["complete"] * 5
    assert "n_iterations" not in json.loads((result.folder / result.rows[0]["trial_dir"] / "job.json").read_text())


def test_auptimizer_trial_counts_without_n_samples(tmp_path):
    hyperband = load_experiment(_experiment(tmp_path, "hyperband", max_iter=81, eta=3), automatic=True)
    assert hyperband.n_samples == default_n_samples("hyperband", hyperband.proposer_options) == 81 + 34 + 15 + 8 + 5
    assert load_experiment(_experiment(tmp_path, "hyperband", max_iter=81, skip_last=1),
                           automatic=True).n_samples == 143  # skip_last drops rounds, not brackets
    bohb = load_experiment(_experiment(tmp_path, "bohb"), automatic=True)  # budgets 0.01..1, eta 3: 5 rungs
    assert bohb.n_samples == default_n_samples("bohb", bohb.proposer_options) > 4
    tpe = load_experiment(_experiment(tmp_path, "tpe"), automatic=True)
    assert tpe.n_samples == 1 and not tpe.proposer_options
