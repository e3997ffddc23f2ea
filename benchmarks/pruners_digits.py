"""The issue-24 pruners beside l1_filter on the digits CNN at equal sparsity: accuracy, size, MACs, latency.

    PYTHONPATH=. .venv/bin/python benchmarks/pruners_digits.py [--sparsity 0.5] [--recover-epochs 3]
        [--threads 1] [--repeats 60] [--only admm amc ...]

Every pruner gets the same target through ``smash``: ``<name>_sparsity`` (the share of the selected layers'
weights to prune; ``l1_filter``/``admm``/``lottery_ticket``/``movement`` prune every layer by it, the search
pruners spread it over the layers as they find best). AMC is given a MACs budget instead: the share of MACs
``l1_filter`` keeps at that sparsity. Filters are ranked by L1 norm (``base_algo="l1"``) and removed with the
speedup. Each pruned model is then fine-tuned the same way (``finetune``, ``--recover-epochs`` epochs, Adam lr
3e-3, batch 32) so the table compares what the pruner kept, not who trained longest.

Data: the zoo model's own train images (1100 train / 247 validation, the validation split scores the search
candidates); accuracy on the 450 held-out test images. Latency: median ms of one batch of 256 images, all
models timed round-robin (benchmarks/common.py) on ``--threads`` threads.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import TensorDataset, default_collate

from slimkit import SmashConfig, smash, zoo
from slimkit.evaluation import count_macs, count_parameters
from slimkit.zoo.digits_cnn import accuracy, digits_split

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_latency, machine_line, print_table  # noqa: E402

#: each pruner's settings beyond the sparsity (a few seconds to a minute each on 1 Zen 3 thread)
SETTINGS: dict[str, dict] = {
    "l1_filter": {},
    "admm": {"num_iterations": 6, "training_epochs": 1, "row": 0.1, "lr": 1e-2},
    "lottery_ticket": {"prune_iterations": 3, "epochs": 2},
    "movement": {"epochs": 4},
    "sensitivity": {"sparsity_per_iter": 0.1, "finetune_steps": 20},
    "net_adapt": {"sparsity_per_iteration": 0.1, "finetune_steps": 10},
    "simulated_annealing": {"eval_finetune_steps": 20},
    "auto_compress": {"num_iterations": 2, "admm_num_iterations": 3, "cool_down_rate": 0.8},
    "amc": {"episodes": 120, "warmup": 30},
}


def _config(data: tuple, example: torch.Tensor) -> SmashConfig:
    cfg = SmashConfig()
    cfg.add_data(data, collate_fn=default_collate)
    cfg.add_example_inputs(example)
    return cfg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sparsity", type=float, default=0.5)
    parser.add_argument("--recover-epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--only", nargs="*", default=list(SETTINGS))
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    x, y, x_test, y_test = digits_split()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, val = order[:1100], order[1100:]
    data = (TensorDataset(x[train], y[train]), TensorDataset(x[val], y[val]), TensorDataset(x_test, y_test))
    base = zoo.load("digits_cnn")
    dense = base.model.eval()
    batch = x_test[:256]
    dense_macs = count_macs(dense, batch)
    print(machine_line(args.threads))
    print(f"sparsity {args.sparsity}, recovery: finetune {args.recover_epochs} epochs, lr 3e-3, batch 32\n")

    models, rows = {"dense": dense}, {}
    l1_macs = None
    for name in ["l1_filter", *[n for n in args.only if n != "l1_filter"]]:
        cfg = _config(data, base.example_inputs)
        cfg["pruner"] = name
        cfg[f"{name}_sparsity"] = args.sparsity if name != "amc" else 0.8
        for key, value in SETTINGS[name].items():
            cfg[f"{name}_{key}"] = value
        if name == "amc":
            cfg["amc_flops_ratio"] = round(l1_macs / dense_macs, 4)
        start = time.perf_counter()
        pruned = smash(dense, cfg, verbose=False).model.eval()
        seconds = time.perf_counter() - start
        as_pruned = accuracy(pruned, x_test, y_test)
        recover = _config(data, base.example_inputs)
        recover["recoverer"] = "finetune"
        recover["finetune_epochs"], recover["finetune_lr"], recover["finetune_seed"] = args.recover_epochs, 3e-3, 0
        recovered = smash(pruned, recover, verbose=False).model.eval()
        macs = count_macs(recovered, batch)
        if name == "l1_filter":
            l1_macs = macs
        models[name] = recovered
        label = f"{name} (MACs budget {cfg['amc_flops_ratio']:.3f})" if name == "amc" else name
        rows[name] = [label, f"{count_parameters(recovered) / 1e3:.1f}k", f"{macs / dense_macs:.3f}",
                      f"{as_pruned:.3f}", f"{accuracy(recovered, x_test, y_test):.3f}", f"{seconds:.1f}"]
        print(f"  {label}: done in {seconds:.1f} s", flush=True)
    latency = interleaved_latency({k: (lambda m=m: m(batch)) for k, m in models.items()}, args.repeats, 5,
                                  args.threads)
    table = [["dense", f"{count_parameters(dense) / 1e3:.1f}k", "1.000", f"{accuracy(dense, x_test, y_test):.3f}",
              "-", "-", f"{latency['dense']:.2f}"]]
    table += [[*row, f"{latency[name]:.2f}"] for name, row in rows.items()]
    print()
    print_table(["pruner", "params", "MACs", "acc as pruned", "acc after finetune", "smash s", "ms / 256 imgs"],
                table)


if __name__ == "__main__":
    main()
