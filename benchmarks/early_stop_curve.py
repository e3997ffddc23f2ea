"""Early stopping on a learning-curve script: mean trial wall time and best result with and without each policy.

The job is a numpy MLP trained by mini-batch SGD by a script speaking Auptimizer's protocol: one
``#Auto: result=`` line (``print_result``) with the held-out accuracy after every epoch. The task (``--task``):

* ``synthetic`` (default): sklearn's ``make_classification``, 10 classes of 3 clusters each in 64 features (32
  informative, 16 redundant, 1 % flipped labels), 24,000 training and 2,000 held-out points, the training set
  shuffled every epoch. Its learning curves look like a deep network's: they rise over all the epochs, carry
  the shuffling's noise, and the search's configurations range from clearly bad from the first epochs (too small a
  learning rate crawls, too large a one oscillates) to good, the good ones ending within a few points.
* ``digits``: the 8x8 digits (1,200 train / 597 held out), no shuffling, the task of the first runs of this
  benchmark; with ``--passes 16`` every configuration of a usable learning rate is within 2 % of its final
  accuracy after the first epoch (no learning curve left to read).

An epoch is ``--passes`` passes over the training set, real work, so the epochs, not the job's start, make up a
trial. The search is the same for every run of a seed: ``--n-samples`` trials of learning rate (log 1e-4 .. 1) x
hidden width (64 .. 256), the random proposer (so every run of a seed proposes the same trials), one worker. Runs
per seed: no early stopping, then each ``aup_policy`` (median, bandit, truncation, curve_fitting) at the settings
in :data:`POLICIES`, in an order rotated from seed to seed (a loaded host's slow minutes fall on every policy).
Printed per run: mean trial wall time (Optuna's start-to-end of each trial: the job plus the engine's per-trial
work), the cut against no early stopping of the same seed, epochs run, and the best accuracy; then per policy the
median cut over the seeds and whether its best accuracy equalled the no-early-stopping best in every seed.

    nice -n 5 .venv/bin/python benchmarks/early_stop_curve.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, print_table  # noqa: E402

from slimkit.experiment import run_experiment  # noqa: E402

SCRIPT = """import json, sys
import numpy as np
c = json.load(open(sys.argv[1]))
data = np.load("data.npz")
x, y, xt, yt = data["x"], data["y"], data["xt"], data["yt"]
rng = np.random.default_rng(0)
w1 = rng.normal(0, 0.1, (64, c["hidden"])); w2 = rng.normal(0, 0.1, (c["hidden"], 10))
onehot = np.eye(10)[y]
for epoch in range(c["epochs"]):
    for _ in range(c["passes"]):
        order = rng.permutation(len(x)) if c["shuffle"] else np.arange(len(x))
        for i in range(0, len(x), 32):
            xb, tb = x[order[i:i + 32]], onehot[order[i:i + 32]]
            h = np.maximum(xb @ w1, 0)
            logits = h @ w2
            p = np.exp(logits - logits.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
            g = (p - tb) / len(xb)
            gh = (g @ w2.T) * (h > 0)
            w2 -= c["lr"] * h.T @ g; w1 -= c["lr"] * xb.T @ gh
    accuracy = float((np.argmax(np.maximum(xt @ w1, 0) @ w2, 1) == yt).mean())
    print("#Auto: result=%r" % accuracy, flush=True)
"""

POLICIES = {
    "none": None,
    "median": {"aup_policy": "median", "aup_policy_steps": 1, "warmup": 1},
    "bandit": {"aup_policy": "bandit", "aup_policy_steps": 2, "bandit_factor": 0.5},
    "truncation": {"aup_policy": "truncation", "aup_policy_steps": 1, "warmup": 1, "truncation_percentage": 0.5},
    "curve_fitting": {"aup_policy": "curve_fitting", "aup_policy_steps": 1, "warmup": 2, "curve_fitting_max_iters": 0,
                      "curve_fitting_threshold": 0.95},
}


def prepare(folder: Path, task: str) -> None:
    """The task's data as numpy arrays and the training script, in ``folder``."""
    from sklearn.datasets import load_digits, make_classification

    if task == "digits":
        x, y = load_digits(return_X_y=True)
        x, train = x / 16.0, 1200
    else:
        x, y = make_classification(n_samples=26000, n_features=64, n_informative=32, n_redundant=16, n_classes=10,
                                   n_clusters_per_class=3, class_sep=1.5, flip_y=0.01, random_state=0)
        train = 24000
        x = (x - x[:train].mean(0)) / x[:train].std(0)
    np.savez(folder / "data.npz", x=x[:train], y=y[:train], xt=x[train:], yt=y[train:])
    (folder / "mlp.py").write_text(SCRIPT)


def experiment(name: str, policy: dict | None, args: argparse.Namespace, seed: int) -> dict:
    """The experiment file of one run (the same search, one early-stopping policy or none)."""
    resource_args: dict = {"track_intermediate_results": True}
    if policy is not None:
        policy = dict(policy)
        if "curve_fitting_max_iters" in policy:
            policy["curve_fitting_max_iters"] = args.epochs
        resource_args["early_stop"] = policy
    return {"name": name, "script": "mlp.py", "resource": "cpu", "target": "max", "proposer": "random",
            "n_samples": args.n_samples, "n_parallel": 1, "random_seed": seed,
            "parameter_config": [{"name": "lr", "range": [1e-4, 1.0], "type": "float", "log": True},
                                 {"name": "hidden", "range": [64, 256], "type": "int"}],
            "runtime_args": {"epochs": args.epochs, "passes": args.passes, "shuffle": args.task == "synthetic"},
            "resource_args": resource_args}


def overheads(folder: Path, args: argparse.Namespace) -> tuple[float, float]:
    """``(job start, runner per trial)`` in seconds, medians of five.

    The job start is the script with no epoch run by hand (Python, numpy, the data); the runner's work is what a
    trial of that script costs beyond it (ask, job config, process start, journal, tell).
    """
    config = folder / "zero.json"
    config.write_text(json.dumps({"lr": 0.1, "hidden": 64, "epochs": 0, "passes": 1, "shuffle": False}))
    bare = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([sys.executable, "mlp.py", str(config)], cwd=folder, check=True, capture_output=True)
        bare.append(time.perf_counter() - started)
    spec = {**experiment("es_zero", None, args, 0), "n_samples": 5,
            "runtime_args": {"epochs": 0, "passes": 1, "shuffle": False}}
    (folder / "zero_exp.json").write_text(json.dumps(spec))
    result = run_experiment(folder / "zero_exp.json", quiet=True)
    trial = statistics.median(r["seconds"] for r in result.rows)
    return statistics.median(bare), trial - statistics.median(bare)


def run(folder: Path, name: str, seed: int, args: argparse.Namespace) -> dict:
    """One run: the experiment of ``name``'s policy for ``seed``; its mean trial time, epochs, pruned and best."""
    path = folder / f"{name}_{seed}.json"
    path.write_text(json.dumps(experiment(f"es_{name}_{seed}", POLICIES[name], args, seed)))
    result = run_experiment(path, quiet=True)
    return {"mean": statistics.fmean(r["seconds"] for r in result.rows),
            "epochs": sum(len(r["intermediate"]) for r in result.rows),
            "pruned": result.counts().get("pruned", 0),
            "best": max(r["result"] for r in result.rows if r["state"] == "complete")}


def main() -> None:
    """Run the search without early stopping and with each policy, for each seed; print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=("synthetic", "digits"), default="synthetic")
    parser.add_argument("--n-samples", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--passes", type=int, default=1, help="passes over the training set per reported epoch")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--policies", nargs="*", default=list(POLICIES), choices=list(POLICIES))
    args = parser.parse_args()
    print(machine_line(1))
    names = [p for p in args.policies if p != "none"]
    rows, cuts, equal = [], {n: [] for n in names}, {n: True for n in names}
    with tempfile.TemporaryDirectory(prefix="slimkit-early-stop-") as tmp:
        folder = Path(tmp)
        prepare(folder, args.task)
        start, runner = overheads(folder, args)
        for i, seed in enumerate(args.seeds):
            order = ["none", *names]
            order = order[i % len(order):] + order[:i % len(order)]  # rotated: load falls on every policy alike
            runs = {name: run(folder, name, seed, args) for name in order}
            base = runs["none"]
            for name in ["none", *names]:
                r = runs[name]
                cut = 100 * (1 - r["mean"] / base["mean"])
                if name != "none":
                    cuts[name].append(cut)
                    equal[name] &= r["best"] == base["best"]
                rows.append([str(seed), name, f"{r['mean']:.2f}", "—" if name == "none" else f"{cut:.0f} %",
                             str(r["epochs"]), str(r["pruned"]), f"{r['best']:.4f}"])
                print(f"seed {seed} {name}: mean trial {r['mean']:.2f} s, epochs {r['epochs']}, best {r['best']:.4f}",
                      flush=True)
    print(f"\n{args.task} task, {args.n_samples} trials x {args.epochs} epochs ({args.passes} pass(es) each), random "
          f"proposer, seeds {args.seeds}, one worker. Per trial besides its epochs: the job's own start (Python, "
          f"numpy, the data; the script with no epoch) {start:.2f} s, the runner's work {runner:.2f} s")
    print_table(["seed", "policy", "mean trial s", "cut", "epochs run", "pruned", "best accuracy"], rows)
    print_table(["policy", "median cut", "cuts per seed", "best = no early stopping's, every seed"],
                [[n, f"{statistics.median(cuts[n]):.0f} %", " / ".join(f"{c:.0f}" for c in cuts[n]),
                  "yes" if equal[n] else "no"] for n in names])


if __name__ == "__main__":
    main()
