"""Early stopping on a learning-curve script: mean trial wall time and best result with and without each policy.

The job is a numpy MLP trained on the digits (1,200 training images, 597 held out) by a script speaking
Auptimizer's protocol: one ``#Auto: result=`` line (``print_result``) with the held-out accuracy after every epoch.
Each epoch is real training work (``--passes`` passes of mini-batch SGD over the training set; ~30-70 ms on a
desktop core), so the epochs, not the job's start, make up a trial. The search is the same for every run:
``--n-samples`` trials of learning rate (log 1e-4 .. 1) x hidden width, the random proposer with one seed (so every
run proposes the same trials), one worker. Runs: no early stopping, then each ``aup_policy`` (median, bandit,
truncation, curve_fitting). Printed per run: mean trial wall time (Optuna's start-to-end of each trial: the job
plus the engine's per-trial work), the cut against no early stopping, epochs run, and the best accuracy; and, for
reading those, what a trial costs besides its epochs: the job's own start and the runner's work.

    nice -n 10 .venv/bin/python benchmarks/early_stop_curve.py --n-samples 12 --epochs 20
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
data = np.load("digits.npz")
x, y, xt, yt = data["x"], data["y"], data["xt"], data["yt"]
rng = np.random.default_rng(0)
w1 = rng.normal(0, 0.1, (64, c["hidden"])); w2 = rng.normal(0, 0.1, (c["hidden"], 10))
onehot = np.eye(10)[y]
for epoch in range(c["epochs"]):
    for _ in range(c["passes"]):
        for i in range(0, len(x), 32):
            xb, tb = x[i:i + 32], onehot[i:i + 32]
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


def prepare(folder: Path) -> None:
    """The digits as numpy arrays and the training script, in ``folder``."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    np.savez(folder / "digits.npz", x=x[:1200], y=y[:1200], xt=x[1200:], yt=y[1200:])
    (folder / "mlp.py").write_text(SCRIPT)


def experiment(name: str, policy: dict | None, args: argparse.Namespace) -> dict:
    """The experiment file of one run (the same search, one early-stopping policy or none)."""
    resource_args: dict = {"track_intermediate_results": True}
    if policy is not None:
        policy = dict(policy)
        if "curve_fitting_max_iters" in policy:
            policy["curve_fitting_max_iters"] = args.epochs
        resource_args["early_stop"] = policy
    return {"name": name, "script": "mlp.py", "resource": "cpu", "target": "max", "proposer": "random",
            "n_samples": args.n_samples, "n_parallel": 1, "random_seed": args.seed,
            "parameter_config": [{"name": "lr", "range": [1e-4, 1.0], "type": "float", "log": True},
                                 {"name": "hidden", "range": [64, 256], "type": "int"}],
            "runtime_args": {"epochs": args.epochs, "passes": args.passes}, "resource_args": resource_args}


def overheads(folder: Path, args: argparse.Namespace) -> tuple[float, float]:
    """``(job start, runner per trial)`` in seconds, medians of five.

    The job start is the script with no epoch run by hand (Python, numpy, the data); the runner's work is what a
    trial of that script costs beyond it (ask, job config, process start, journal, tell).
    """
    config = folder / "zero.json"
    config.write_text(json.dumps({"lr": 0.1, "hidden": 64, "epochs": 0, "passes": 1}))
    bare = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([sys.executable, "mlp.py", str(config)], cwd=folder, check=True, capture_output=True)
        bare.append(time.perf_counter() - started)
    spec = {**experiment("es_zero", None, args), "n_samples": 5, "runtime_args": {"epochs": 0, "passes": 1}}
    (folder / "zero_exp.json").write_text(json.dumps(spec))
    result = run_experiment(folder / "zero_exp.json", quiet=True)
    trial = statistics.median(r["seconds"] for r in result.rows)
    return statistics.median(bare), trial - statistics.median(bare)


def main() -> None:
    """Run the search without early stopping and with each policy; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--passes", type=int, default=5, help="passes over the training set per reported epoch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", nargs="*", default=list(POLICIES), choices=list(POLICIES))
    args = parser.parse_args()
    print(machine_line(1))
    with tempfile.TemporaryDirectory(prefix="slimkit-early-stop-") as tmp:
        folder = Path(tmp)
        prepare(folder)
        start, runner = overheads(folder, args)
        rows, baseline = [], None
        for name in ["none", *[p for p in args.policies if p != "none"]]:
            path = folder / f"{name}.json"
            path.write_text(json.dumps(experiment(f"es_{name}", POLICIES[name], args)))
            started = time.perf_counter()
            result = run_experiment(path, quiet=True)
            wall = time.perf_counter() - started
            seconds = [r["seconds"] for r in result.rows]
            mean = statistics.fmean(seconds)
            baseline = baseline or mean
            epochs = sum(len(r["intermediate"]) for r in result.rows)
            best = max(r["result"] for r in result.rows if r["state"] == "complete")
            counts = result.counts()
            rows.append([name, f"{mean:.2f}", f"{100 * (1 - mean / baseline):.0f} %", f"{epochs}",
                         f"{counts.get('pruned', 0)}", f"{best:.4f}", f"{wall:.1f}"])
            print(f"{name}: mean trial {mean:.2f} s, epochs {epochs}, best {best:.4f}", flush=True)
    print(f"\n{args.n_samples} trials x {args.epochs} epochs ({args.passes} passes each), random proposer seed "
          f"{args.seed}, one worker. Per trial besides its epochs: the job's own start (Python, numpy, the data; "
          f"the script with no epoch) {start:.2f} s, the runner's work {runner:.2f} s")
    print_table(["policy", "mean trial s", "cut", "epochs run", "pruned", "best accuracy", "run s"], rows)


if __name__ == "__main__":
    main()
