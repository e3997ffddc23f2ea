"""Early stopping: Auptimizer's ``aup_policy`` values as Optuna pruners, fed by the script's learning curve.

The script trains a small MLP on the digits (numpy only, so a job takes a fraction of a second) and reports the
test accuracy after every epoch with one ``#Auto: result=`` line per epoch, as Auptimizer's ``print_result``
does; the last line is the trial's result. Tiny learning rates learn slowly: those are the trials to stop.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import optuna
import pytest

from slimkit.errors import ConfigError
from slimkit.experiment import load_experiment, run_experiment
from slimkit.experiment.curve_fitting import CurveFittingPruner, predict_final
from slimkit.experiment.median import RunningAverageMedianPruner
from slimkit.experiment.pruners import bandit_reduction_factor
from slimkit.experiment.study import make_pruner

EPOCHS = 10
MLP = """import json, sys
import numpy as np
c = json.load(open(sys.argv[1]))
data = np.load("digits.npz")
x, y, xt, yt = data["x"], data["y"], data["xt"], data["yt"]
rng = np.random.default_rng(0)
w1 = rng.normal(0, 0.1, (64, c["hidden"])); w2 = rng.normal(0, 0.1, (c["hidden"], 10))
onehot = np.eye(10)[y]
for epoch in range(N_EPOCHS):
    for i in range(0, len(x), 64):
        xb, tb = x[i:i + 64], onehot[i:i + 64]
        h = np.maximum(xb @ w1, 0)
        logits = h @ w2
        p = np.exp(logits - logits.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
        g = (p - tb) / len(xb)
        gh = (g @ w2.T) * (h > 0)
        w2 -= c["lr"] * h.T @ g; w1 -= c["lr"] * xb.T @ gh
    accuracy = float((np.argmax(np.maximum(xt @ w1, 0) @ w2, 1) == yt).mean())
    print("#Auto: result=%r" % accuracy, flush=True)
""".replace("N_EPOCHS", str(EPOCHS))


@pytest.fixture(scope="module")
def digits_folder(tmp_path_factory) -> Path:
    from sklearn.datasets import load_digits

    folder = tmp_path_factory.mktemp("digits_mlp")
    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    np.savez(folder / "digits.npz", x=x[:1200], y=y[:1200], xt=x[1200:], yt=y[1200:])
    (folder / "mlp.py").write_text(MLP)
    return folder


def _experiment(folder: Path, policy: dict | bool, name: str, **fields) -> Path:
    exp = {"name": name, "script": "mlp.py", "resource": "cpu", "target": "max", "proposer": "random",
           "n_samples": 8, "n_parallel": 1, "random_seed": 0,
           "parameter_config": [{"name": "lr", "range": [1e-4, 1.0], "type": "float", "log": True},
                                {"name": "hidden", "range": [16, 32], "type": "int"}],
           "resource_args": {"early_stop": policy, "track_intermediate_results": True}, **fields}
    path = folder / f"{name}.json"
    path.write_text(json.dumps(exp))
    return path


@pytest.mark.slow  # ~7 s each (8 jobs); the fast tier checks each pruner's rule in process (below)
@pytest.mark.parametrize(("policy", "pruner"), [
    ({"aup_policy": "median", "aup_policy_steps": 2}, RunningAverageMedianPruner),
    ({"aup_policy": "bandit", "aup_policy_steps": 2, "bandit_factor": 0.5}, optuna.pruners.SuccessiveHalvingPruner),
    ({"aup_policy": "truncation", "aup_policy_steps": 2, "truncation_percentage": 0.5},
     optuna.pruners.PercentilePruner),
    ({"aup_policy": "curve_fitting", "aup_policy_steps": 1, "curve_fitting_max_iters": EPOCHS,
      "curve_fitting_threshold": 0.95, "curve_fitting_timeout": 60}, CurveFittingPruner),
])
def test_policies_stop_slow_learners(digits_folder, policy, pruner):
    path = _experiment(digits_folder, policy, f"es_{policy['aup_policy']}")
    exp = load_experiment(path)
    assert isinstance(make_pruner(exp), pruner) and exp.track_intermediate_results
    result = run_experiment(path, quiet=True)
    counts = result.counts()
    assert len(result.rows) == 8 and counts.get("pruned", 0) > 0 and counts.get("complete", 0) > 0
    assert "failed" not in counts
    for row in result.rows:  # every epoch was a step; pruned trials stopped before the last one
        steps = sorted(row["intermediate"])
        assert steps == list(range(1, len(steps) + 1))
        assert len(steps) == EPOCHS if row["state"] == "complete" else len(steps) < EPOCHS
        if row["state"] == "complete":
            assert row["result"] == row["intermediate"][EPOCHS]  # the last print_result is the result
    (best,) = result.best
    assert best["state"] == "complete" and best["result"] > 0.85
    pruned = [r for r in result.rows if r["state"] == "pruned"]
    assert min(r["params"]["lr"] for r in pruned) < 0.05  # the slow learners went first


@pytest.mark.slow  # ~12 s: 16 jobs
def test_early_stopping_saves_epochs_at_an_equal_best(digits_folder):
    plain = run_experiment(_experiment(digits_folder, False, "es_none"), quiet=True)
    assert isinstance(make_pruner(load_experiment(digits_folder / "es_none.json")), optuna.pruners.NopPruner)
    cut = run_experiment(_experiment(digits_folder, {"aup_policy": "median", "aup_policy_steps": 1}, "es_cut"),
                         quiet=True)
    epochs = [sum(len(r["intermediate"]) for r in res.rows) for res in (plain, cut)]
    assert epochs[0] == 8 * EPOCHS and epochs[1] < 0.75 * epochs[0]
    assert cut.best[0]["result"] == plain.best[0]["result"]  # the same seed proposes the same trials


def test_curve_prediction_extrapolates_a_saturating_curve():
    curve = [0.9 - 0.6 * math.exp(-0.35 * x) for x in range(1, 9)]
    assert predict_final(curve, 40) == pytest.approx(0.9, abs=0.02)
    power = [1.0 - 0.8 * x ** -0.7 for x in range(1, 13)]
    assert predict_final(power, 100) == pytest.approx(1.0 - 0.8 * 100 ** -0.7, abs=0.03)
    assert predict_final(curve[:2], 40) is None and predict_final(curve, 5) == curve[-1]
    noisy = np.array(curve) + np.random.default_rng(0).normal(0, 0.01, len(curve))
    assert predict_final(noisy, 40) == pytest.approx(0.9, abs=0.1)


@pytest.mark.parametrize(("direction", "sign"), [("maximize", 1.0), ("minimize", -1.0)])
def test_curve_fitting_pruner_compares_with_the_best_finished_trial(direction, sign):
    study = optuna.create_study(direction=direction, pruner=CurveFittingPruner(max_iters=20, threshold=0.95))
    good = [sign * (0.9 - 0.5 * math.exp(-0.3 * x)) for x in range(1, 21)]
    study.add_trial(optuna.trial.create_trial(value=good[-1], intermediate_values=dict(enumerate(good, 1))))
    for curve, stop in (([sign * (0.5 - 0.3 * math.exp(-0.3 * x)) for x in range(1, 6)], True), (good[:5], False)):
        trial = study.ask()
        for step, value in enumerate(curve, 1):
            trial.report(value, step)
        assert trial.should_prune() is stop


def test_policy_fields_and_bandit_factor():
    assert [bandit_reduction_factor(f) for f in (0.3, 0.5, 2 / 3, 0.9)] == [2, 2, 3, 10]
    base = {"name": "e", "model": "mlp", "search": {"pruner": "l1_filter"}}
    for policy, message in [
        ({"aup_policy": "vizier", "aup_policy_steps": 1}, "aup_policy: 'vizier' is not a policy"),
        ({"aup_policy": "median"}, "aup_policy_steps: missing"),
        ({"aup_policy": "median", "aup_policy_steps": 0}, "aup_policy_steps: a whole number >= 1"),
        ({"aup_policy": "median", "aup_policy_steps": 1, "bandit_factor": 0.5}, "belongs to the 'bandit' policy"),
        ({"aup_policy": "bandit", "aup_policy_steps": 1, "bandit_factor": 1}, "bandit_factor: below 1"),
        ({"aup_policy": "truncation", "aup_policy_steps": 1, "truncation_percentage": 2}, "<= 1"),
        ({"aup_policy": "curve_fitting", "aup_policy_steps": 1}, "curve_fitting_max_iters: missing"),
        ("median", "resource_args.early_stop: true, or a policy"),
    ]:
        with pytest.raises(ConfigError) as info:
            load_experiment({**base, "resource_args": {"early_stop": policy}}, automatic=True)
        assert message in str(info.value)


def _study(direction: str, pruner: optuna.pruners.BasePruner, finished: list[list[float]]) -> optuna.Study:
    study = optuna.create_study(direction=direction, pruner=pruner)
    for curve in finished:
        study.add_trial(optuna.trial.create_trial(value=curve[-1], intermediate_values=dict(enumerate(curve, 1))))
    return study


def _checks(study: optuna.Study, curve: list[float]) -> list[bool]:
    """should_prune after each step of ``curve`` (the trial is told pruned at the end)."""
    trial, out = study.ask(), []
    for step, value in enumerate(curve, 1):
        trial.report(value, step)
        out.append(trial.should_prune())
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return out


@pytest.mark.parametrize(("direction", "sign"), [("maximize", 1.0), ("minimize", -1.0)])
def test_median_compares_running_averages_as_auptimizer_does(direction, sign):
    finished = [[sign * v for v in curve] for curve in ([0.5, 0.6, 0.7, 0.8], [0.3, 0.5, 0.6, 0.7],
                                                        [0.1, 0.2, 0.3, 0.4])]
    study = _study(direction, RunningAverageMedianPruner(interval=1), finished)
    # running averages of the others at steps 1..4: medians 0.3, 0.4, 0.4667, 0.525. A noisy curve falls behind
    # on its running average at step 3 ((0.2 + 0.62 + 0.35) / 3 = 0.39), where Optuna's MedianPruner keeps it:
    # its best value so far (0.62) beats the median of the others' values at step 3 (0.6)
    noisy = [sign * v for v in (0.2, 0.62, 0.35, 0.5)]
    assert _checks(study, noisy) == [True, False, True, True]
    three = optuna.trial.create_trial(state=optuna.trial.TrialState.RUNNING,
                                      intermediate_values=dict(enumerate(noisy[:3], 1)))
    assert not optuna.pruners.MedianPruner(n_startup_trials=1).prune(study, three)
    assert RunningAverageMedianPruner().prune(study, three) is True
    assert _checks(study, [sign * v for v in (0.4, 0.5, 0.6, 0.7)]) == [False] * 4


def test_median_checks_on_auptimizers_schedule():
    study = _study("maximize", RunningAverageMedianPruner(interval=3, warmup=4), [[0.9] * 9])
    assert _checks(study, [0.1] * 9) == [False] * 5 + [True, False, False, True]  # multiples of 3 from 4 values
    alone = optuna.create_study(direction="maximize", pruner=RunningAverageMedianPruner())
    assert _checks(alone, [0.1, 0.2]) == [False, False]  # nobody to compare with
    assert _checks(_study("maximize", RunningAverageMedianPruner(), [[0.5, 0.6]]), [0.4, float("nan")]) == [True,
                                                                                                            True]
    with pytest.raises(ValueError, match="interval >= 1"):
        RunningAverageMedianPruner(interval=0)


def test_early_stop_true_stays_optunas_median_pruner(tmp_path):
    base = {"name": "e", "model": "mlp", "search": {"pruner": "l1_filter"}}
    exp = load_experiment({**base, "resource_args": {"early_stop": True}}, automatic=True)
    assert type(make_pruner(exp)) is optuna.pruners.MedianPruner
    exp = load_experiment({**base, "resource_args": {"early_stop": {"aup_policy": "median", "aup_policy_steps": 2,
                                                                    "warmup": 1}}}, automatic=True)
    pruner = make_pruner(exp)
    assert isinstance(pruner, RunningAverageMedianPruner) and (pruner.interval, pruner.warmup) == (2, 1)


def test_curve_fitting_stops_a_bad_curve_at_once_and_spares_a_rising_good_one():
    # two curves of benchmarks/early_stop_curve.py (seed 3): a finished trial (0.822), then one that ends at 0.818
    good = [0.4775, 0.5565, 0.6165, 0.652, 0.6975, 0.7225, 0.738, 0.751, 0.7665, 0.7805, 0.7855, 0.7905, 0.7955,
            0.802, 0.8075, 0.8105, 0.8145, 0.8205, 0.822, 0.822]
    rising = [0.5285, 0.647, 0.706, 0.7325, 0.763, 0.777]
    study = _study("maximize", CurveFittingPruner(max_iters=20, threshold=0.95, warmup=2), [good])
    assert _checks(study, [0.10, 0.11, 0.12, 0.13, 0.14]) == [False, False, True, True, True]  # from 3 points
    # at step 4 the weighted fit bends the rising curve over below 0.95 * 0.822; the most favourable family
    # does not, so the trial (which ends at 0.818) is not stopped
    assert predict_final(rising[:4], 20) < 0.95 * good[-1] < predict_final(rising[:4], 20, optimistic=True)
    assert _checks(study, rising) == [False] * len(rising)
