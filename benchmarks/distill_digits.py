"""Recovery after heavy filter pruning: no recovery vs plain fine-tuning vs knowledge distillation, in one run.

    PYTHONPATH=. .venv/bin/python benchmarks/distill_digits.py [--ratios 0.5 0.7 0.85] [--seeds 0 1 2]
        [--epochs 8] [--lr 3e-3] [--threads 1] [--widths 0.25]

The digits CNN (the zoo's, trained on sklearn's 8x8 digits) is pruned with ``l1_filter`` + speedup at each
ratio, then recovered through smash with the same budget (epochs, lr, batch size, seed) by

* ``finetune``: the task loss (cross-entropy on the labels) -- the usual baseline;
* ``kd_recover``: KL to the dense model's outputs at temperature 4 plus the task loss (Hinton et al.).

Then, for each ``--widths`` multiplier, a narrow student made by ``width_distill`` (every conv/linear layer keeps
that fraction of its filters, largest L1 norm first) is trained with the same budget twice from the same
starting weights: with knowledge distillation from the dense model (KL at temperature 4 + attention transfer +
the task loss: ``width_distill``'s defaults) and alone (``logits_weight = at_weight = 0``: the task loss only).

Training uses the zoo model's own train images (1100 train / 247 validation); accuracy is measured on the 450
held-out test images. Prints mean and min/max test accuracy over seeds, parameters, and training seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import TensorDataset, default_collate

from slimkit import SmashConfig, smash, zoo
from slimkit.evaluation import count_parameters
from slimkit.zoo.digits_cnn import accuracy, digits_split

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, print_table  # noqa: E402


def _config(data: tuple, example: torch.Tensor, ratio: float) -> SmashConfig:
    cfg = SmashConfig()
    cfg.add_data(data, collate_fn=default_collate)
    cfg.add_example_inputs(example)
    cfg["pruner"] = "l1_filter"
    cfg["l1_filter_sparsity"] = ratio
    return cfg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.5, 0.7, 0.85])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--widths", type=float, nargs="*", default=[0.25])
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    x, y, x_test, y_test = digits_split()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, val = order[:1100], order[1100:]
    data = (TensorDataset(x[train], y[train]), TensorDataset(x[val], y[val]), TensorDataset(x_test, y_test))
    base = zoo.load("digits_cnn")
    dense_acc, dense_params = accuracy(base.model, x_test, y_test), count_parameters(base.model)
    print(machine_line(args.threads))
    print(f"epochs {args.epochs}, lr {args.lr}, batch 32, seeds {args.seeds}\n")
    rows = [["dense", "-", f"{dense_params / 1e3:.1f}k", f"{dense_acc:.3f}", "", "-"]]
    for ratio in args.ratios:
        pruned = smash(base.model, _config(data, base.example_inputs, ratio), verbose=False)
        params = f"{count_parameters(pruned.model) / 1e3:.1f}k"
        rows.append([f"l1_filter {ratio:.0%}", "none", params, f"{accuracy(pruned.model, x_test, y_test):.3f}",
                     "", "-"])
        for recoverer in ("finetune", "kd_recover"):
            accs, seconds = [], []
            for seed in args.seeds:
                cfg = _config(data, base.example_inputs, ratio)
                cfg["recoverer"] = recoverer
                for key, value in (("epochs", args.epochs), ("lr", args.lr), ("seed", seed)):
                    cfg[f"{recoverer}_{key}"] = value
                start = time.perf_counter()
                model = smash(base.model, cfg, verbose=False).model
                seconds.append(time.perf_counter() - start)
                accs.append(accuracy(model, x_test, y_test))
            rows.append([f"l1_filter {ratio:.0%}", recoverer, params, f"{statistics.mean(accs):.3f}",
                         f"{min(accs):.3f}-{max(accs):.3f}", f"{statistics.median(seconds):.1f}"])
    print_table(["model", "recovery", "params", "test acc (mean)", "min-max", "smash s"], rows)
    if args.widths:
        print()
        print_table(["student", "training", "params", "test acc (mean)", "min-max", "smash s"],
                    width_rows(args, data, base, x_test, y_test))


def width_rows(args: argparse.Namespace, data: tuple, base: object, x_test: torch.Tensor,
               y_test: torch.Tensor) -> list[list[str]]:
    """A width-multiplier student trained with KD (width_distill's defaults) and alone, same budget and seeds."""
    rows = []
    for width in args.widths:
        for label, weights in (("KD (KL + AT + task)", {}), ("alone (task loss)", {"logits_weight": 0.0,
                                                                                    "at_weight": 0.0})):
            accs, seconds, params = [], [], 0
            for seed in args.seeds:
                cfg = SmashConfig({"width_distill": {"width": width, "epochs": args.epochs, "lr": args.lr,
                                                     "seed": seed, **weights}})
                cfg.add_data(data, collate_fn=default_collate)
                start = time.perf_counter()
                model = smash(base.model, cfg, verbose=False).model  # type: ignore[attr-defined]
                seconds.append(time.perf_counter() - start)
                accs.append(accuracy(model, x_test, y_test))
                params = count_parameters(model)
            rows.append([f"width {width:g}", label, f"{params / 1e3:.1f}k", f"{statistics.mean(accs):.3f}",
                         f"{min(accs):.3f}-{max(accs):.3f}", f"{statistics.median(seconds):.1f}"])
    return rows


if __name__ == "__main__":
    main()
