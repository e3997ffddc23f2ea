"""Joint search on the digits CNN: pruner x sparsity x quantizer (x bits), a measured accuracy/latency Pareto front.

The search is slimkit's script-free experiment on Optuna (NSGA-II, seeded): pruner in {none, l1_filter, fpgm,
slim} with its sparsity, quantizer in {none, int8_dynamic, int8_static, rtn} with rtn's bits. Each trial smashes
the trained digits CNN, measures held-out accuracy (the zoo's 450-image test split) and median latency of one
batch of 64 images, and saves the model; only the Pareto set is kept. With ``--compare-parallel N`` it then runs
N trials with one worker and N with two and prints trials per hour for both.

    nice -n 19 .venv/bin/python benchmarks/experiment_digits.py --n-samples 40 --compare-parallel 12
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, print_table  # noqa: E402

from slimkit.experiment import run_experiment  # noqa: E402
from slimkit.experiment.bench import Bench  # noqa: E402

SEARCH = {
    "pruner": [None, "l1_filter", "fpgm", "slim"],
    "l1_filter_sparsity": {"range": [0.05, 0.7], "type": "float"},
    "fpgm_sparsity": {"range": [0.05, 0.7], "type": "float"},
    "slim_sparsity": {"range": [0.05, 0.7], "type": "float"},
    "quantizer": [None, "int8_dynamic", "int8_static", "rtn"],
    "rtn_bits": [2, 4, 8],
}


def experiment(name: str, n_samples: int, n_parallel: int, threads: int, seed: int) -> dict:
    """The experiment file of the joint search."""
    return {"name": name, "model": "digits_cnn", "n_samples": n_samples, "n_parallel": n_parallel,
            "proposer": "nsga2", "random_seed": seed, "resource_args": {"save_model": True},
            "runtime_args": {"threads": threads, "repeats": 15, "warmup": 3},
            "objectives": {"accuracy": "max", "latency": "min"}, "search": SEARCH}


def run(folder: Path, spec: dict) -> tuple[object, float]:
    """Write the experiment file, run it, return the result and the wall time."""
    path = folder / f"{spec['name']}.json"
    path.write_text(json.dumps(spec, indent=2))
    started = time.perf_counter()
    result = run_experiment(path, automatic=True, folder=folder / spec["name"], quiet=True)
    return result, time.perf_counter() - started


def main() -> None:
    """Run the joint search, print the front (and the parallel comparison), write the PNGs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare-parallel", type=int, default=0, metavar="N",
                        help="also run N trials with 1 and with 2 workers (1 thread each) and compare trials/hour")
    parser.add_argument("--output", default=None, help="folder for the experiment folders (default: a temp dir)")
    args = parser.parse_args()
    folder = Path(args.output or tempfile.mkdtemp(prefix="slimkit-exp-digits-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(machine_line(args.threads))

    bench = Bench("digits_cnn", {"accuracy": "max", "latency": "min"}, runtime_args={"threads": args.threads,
                                                                                       "repeats": 15, "warmup": 3})
    base = bench.measure(bench.base, ["accuracy", "latency"])
    print(f"base digits CNN: accuracy {base['accuracy']:.4f}, latency {base['latency']:.3f} ms, "
          f"{base['size'] / 1e3:.1f} kB, {base['params']:.0f} params")

    result, seconds = run(folder, experiment("joint", args.n_samples, 1, args.threads, args.seed))
    counts = result.counts()
    print(f"\njoint search: {len(result.rows)} trials in {seconds:.0f} s ({counts}); Pareto front "
          f"({len(result.best)} points, accuracy max / latency min):")
    rows = [[f"#{r['number']}", r["recipe"], f"{r['accuracy']:.4f}", f"{r['latency']:.3f}",
             f"{base['latency'] / r['latency']:.2f}x", f"{r['measured']['size'] / 1e3:.1f}"]
            for r in sorted(result.best, key=lambda r: r["latency"])]
    print_table(["trial", "recipe", "accuracy", "latency ms", "speedup", "size kB"], rows)
    failed = [r for r in result.rows if r["state"] == "failed"]
    for r in failed[:5]:
        print(f"failed trial #{r['number']} ({r['recipe']}): {r['reason'][:150]}")
    print(f"plots: {result.folder / 'pareto.png'}, {result.folder / 'history.png'}")

    if args.compare_parallel:
        rates = {}
        for workers in (1, 2):
            spec = experiment(f"parallel_{workers}", args.compare_parallel, workers, 1, args.seed + 1)
            res, wall = run(folder, spec)
            rates[workers] = len(res.rows) / wall * 3600
            print(f"n_parallel={workers}: {len(res.rows)} trials in {wall:.1f} s = {rates[workers]:.0f} trials/hour")
        print(f"two workers: {rates[2] / rates[1]:.2f}x the trials per hour of one")


if __name__ == "__main__":
    main()
