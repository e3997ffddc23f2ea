"""Experiment runner at work: trials per hour with n_parallel=2 vs 1, and resume after `kill -9` of the runner.

Each trial is a real compression job in its own process (Auptimizer's script form): prune the trained digits CNN
with ``l1_filter`` at the proposed sparsity, speed it up, fine-tune it for a fixed number of steps on one thread,
report held-out accuracy. Throughput: the same seeded search of ``--trials`` trials with one worker and with two,
run alternately ``--rounds`` times; trials per hour from wall time, with the jobs' own CPU seconds beside it.
``--sleep-job S`` swaps the job for one that only sleeps S seconds (no torch): what the runner itself
parallelises when CPU is not the limit. Resume: `slimkit run --automatic` in a subprocess is killed with
SIGKILL while a trial runs, then the same command runs again; it must keep every finished trial unchanged,
rerun the interrupted one with the same parameters and end with exactly n_samples trials.

    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/experiment_scaleout.py --trials 8 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line  # noqa: E402

from slimkit.experiment import load_experiment, run_experiment  # noqa: E402
from slimkit.experiment.study import open_study  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

JOB = """#!/usr/bin/env python
import sys

import torch

import slimkit
from slimkit import zoo

torch.set_num_threads(1)
torch.manual_seed(0)
config = slimkit.BasicConfig().load(sys.argv[1])
model, inputs = zoo.load("digits_cnn")
pruner = slimkit.create_compressor(model, config)
model = pruner.compress()
model = pruner.apply_speedup(dummy_input=inputs[:1])
x, y, x_test, y_test = zoo.digits_split()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
model.train()
for step in range(config.steps):
    batch = torch.randint(0, len(x), (64,))
    loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
model.eval()
with torch.no_grad():
    slimkit.print_result(float((model(x_test).argmax(-1) == y_test).float().mean()))
"""


SLEEP_JOB = """#!/usr/bin/env python
import json, sys, time
config = json.load(open(sys.argv[1]))
time.sleep(config["sleep"])
print("#Auto: result=%r" % config["config_list"][0]["sparsity"])
"""


def experiment(folder: Path, name: str, n_samples: int, n_parallel: int, steps: int, seed: int,
               sleep: float = 0.0) -> Path:
    """Write the job script and the experiment file; return the file."""
    (folder / "job.py").write_text(SLEEP_JOB if sleep else JOB)
    path = folder / f"{name}.json"
    path.write_text(json.dumps({
        "name": name, "script": "job.py", "n_samples": n_samples, "n_parallel": n_parallel, "proposer": "random",
        "random_seed": seed, "target": "max", "runtime_args": {"steps": steps, "sleep": sleep},
        "compression": {"framework": "torch", "type": "pruning", "compressor": "l1_filter",
                        "config_list": [{"sparsity": {"range": [0.1, 0.6], "type": "float"},
                                         "op_types": ["Conv2d"]}]}}))
    return path


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def throughput(folder: Path, trials: int, rounds: int, steps: int, sleep: float = 0.0) -> None:
    """Alternate n_parallel=1 and 2 on the same seeded search; print trials/hour and the ratio per round."""
    ratios = []
    for r in range(rounds):
        rates = {}
        for workers in (1, 2):
            path = experiment(folder, f"tp_{r}_{workers}", trials, workers, steps, seed=r, sleep=sleep)
            cpu, load = _child_cpu(), os.getloadavg()[0]
            started = time.perf_counter()
            result = run_experiment(path, automatic=True, quiet=True)
            wall = time.perf_counter() - started
            assert result.counts().get("complete") == trials, result.counts()
            rates[workers] = trials / wall * 3600
            print(f"round {r + 1}: n_parallel={workers}: {trials} trials in {wall:.1f} s = {rates[workers]:.0f} "
                  f"trials/hour (job CPU {_child_cpu() - cpu:.0f} s; load average before {load:.1f})", flush=True)
        ratios.append(rates[2] / rates[1])
        print(f"round {r + 1}: two workers = {ratios[-1]:.2f}x the trials per hour of one", flush=True)
    print(f"throughput ratio n_parallel=2 / 1: {', '.join(f'{x:.2f}x' for x in ratios)} "
          f"(mean {sum(ratios) / len(ratios):.2f}x)")


def resume(folder: Path, n_samples: int, steps: int) -> None:
    """kill -9 the runner while a trial runs, rerun the same command, check nothing finished was lost."""
    path = experiment(folder, "resume", n_samples, 1, steps, seed=7)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "slimkit", "run", str(path), "--automatic"]
    runner = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = folder / "runs" / "resume"
    while not (runs / "trials").is_dir() or len(list((runs / "trials").iterdir())) < n_samples // 2 + 1:
        time.sleep(0.2)
    time.sleep(1.0)  # the (n/2+1)-th job is under way
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    exp = load_experiment(path, True)
    before = {t.number: (t.params, t.values) for t in open_study(runs, exp).trials if t.state.name == "COMPLETE"}
    running = [t.number for t in open_study(runs, exp).trials if t.state.name == "RUNNING"]
    print(f"resume: killed the runner (SIGKILL) with {len(before)} trial(s) finished and trial(s) {running} running")
    started = time.perf_counter()
    again = subprocess.run(command, env=env, capture_output=True, text=True)
    print(f"resume: the rerun took {time.perf_counter() - started:.1f} s, exit status {again.returncode}; it said: "
          + " | ".join(line for line in again.stderr.splitlines() if "resuming" in line))
    trials = open_study(runs, exp).trials
    complete = {t.number: (t.params, t.values) for t in trials if t.state.name == "COMPLETE"}
    kept = all(complete.get(n) == v for n, v in before.items())
    cut = [t for t in trials if t.user_attrs.get("interrupted")]
    rerun = all(any(t.params == c.params for t in trials if t.state.name == "COMPLETE") for c in cut)
    print(f"resume: {len(complete)} complete of n_samples={n_samples} (total equals n_samples: "
          f"{len(complete) == n_samples}); finished trials kept unchanged: {kept}; interrupted trial(s) "
          f"{[t.number for t in cut]} rerun with the same parameters: {rerun}")


def main() -> None:
    """Run the throughput comparison and the resume check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8, help="trials per throughput run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating 1-worker / 2-worker rounds")
    parser.add_argument("--steps", type=int, default=300, help="fine-tuning steps per job (its length)")
    parser.add_argument("--resume-samples", type=int, default=6)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-resume", action="store_true")
    parser.add_argument("--sleep-job", type=float, default=0.0, metavar="S",
                        help="throughput of jobs that only sleep S seconds (the runner's own parallelism)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="slimkit-exp-scaleout-"))
    print(machine_line(1))
    if not args.skip_throughput:
        throughput(folder, args.trials, args.rounds, args.steps, args.sleep_job)
    if not args.skip_resume:
        resume(folder, args.resume_samples, args.steps)


if __name__ == "__main__":
    main()
