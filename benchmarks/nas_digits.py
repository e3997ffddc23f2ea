"""One-shot NAS on digits: SPOS supernet + evolution search vs random subnets under the same FLOPs limit.

    PYTHONPATH=. .venv/bin/python benchmarks/nas_digits.py [--flops 1e6] [--seeds 0 1 2] [--random 20]
        [--supernet-epochs 30] [--retrain-epochs 15] [--search-epochs 10] [--threads 1]

Per seed: train slimkit's ``SearchableCNN`` supernet (a kernel 3/5/7 choice per block, a width choice and a
depth 0-2 choice per stage: 59,049 subnets) with ``SPOS`` (one uniformly sampled path per step) on 1,100 of the
digits training images; run ``EvolutionSearchLoop`` under ``flops <= --flops`` scoring each candidate by its
accuracy on the 247 held-out training images after BN recalibration; draw ``--random`` random subnets under the
same limit (also reported: the median of the half of them with the most FLOPs, a baseline that spends the
budget as the search does). Every subnet (the evolved one and each random one) is exported as a plain module,
re-initialised and retrained from scratch the same way (same epochs, lr, batches, seed), then measured on the
450 test images. Prints the evolved subnet's test accuracy next to the random subnets' median (and min/max),
the mean over seeds, FLOPs, and the seconds each phase took.

    PYTHONPATH=. .venv/bin/python benchmarks/nas_digits.py --sandwich [--seeds 0 1] [--supernet-epochs 30]

``--sandwich`` compares the three supernet trainings under the same FLOPs limit instead: ``SPOS`` and ``BigNAS``
(sandwich rule + inplace distillation, 2 random subnets per step) on ``SearchableCNN``, each followed by the same
evolution search, and ``AutoSlim`` on the zoo's plain ``digits_cnn`` (widths 1/8 .. 8/8 of each layer) followed
by greedy slimming to the limit. For each found subnet: its test accuracy with the supernet's shared weights
(BN recalibrated on 512 training images, no retraining -- what BigNAS and AutoSlim train for), and after
retraining from scratch as above.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from slimkit.engines.nas import GreedyChannelSearch, SearchResult, measure_subnet
from slimkit.razor import (
    SPOS,
    AutoSlim,
    BigNAS,
    EvolutionSearchLoop,
    SearchableCNN,
    batch_loss,
    calibrate_bn,
    export_subnet,
)
from slimkit.training import fit
from slimkit.zoo import build as zoo_build
from slimkit.zoo.digits_cnn import accuracy, digits_split

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, print_table  # noqa: E402


def batches(x: torch.Tensor, y: torch.Tensor, size: int, seed: int, epochs: int) -> list[tuple]:
    """``epochs`` shuffled passes of (x, y) in batches, fixed by ``seed`` (the same for every model of a seed)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=g)
        out += [(x[order[i:i + size]], y[order[i:i + size]]) for i in range(0, len(x), size)]
    return out


def retrain(supernet: nn.Module, subnet: dict, data: list[tuple], seed: int, lr: float) -> nn.Module:
    """The subnet exported, re-initialised with ``seed`` and trained from scratch on ``data``."""
    model = export_subnet(supernet, subnet)
    torch.manual_seed(seed)
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
        if isinstance(module, nn.BatchNorm2d):
            module.reset_running_stats()
    fit(model, data, lr=lr, epochs=1, seed=seed, progress=False)
    return model.eval()


def random_subnets(supernet: nn.Module, n: int, flops: float, x1: torch.Tensor, seed: int) -> list[dict]:
    mutator, rng, found, keys = SPOS(supernet).mutator, random.Random(10_000 + seed), [], set()
    while len(found) < n:
        subnet = mutator.sample_choices(rng)
        key = str(sorted(subnet.items()))
        if key not in keys and measure_subnet(supernet, subnet, ["flops"], x1)["flops"] <= flops:
            found.append(subnet)
            keys.add(key)
    return found


def evolve(algo: nn.Module, score: Callable[[nn.Module], float], x1: torch.Tensor, calib: list, seed: int,
           args: argparse.Namespace) -> SearchResult:
    """The evolution search every supernet gets: 20 candidates, top 5, 8 mutations + 8 crossovers, BN recalibrated."""
    return EvolutionSearchLoop(algo, score, example_inputs=x1, max_epochs=args.search_epochs, num_candidates=20,
                               top_k=5, num_mutation=8, num_crossover=8, mutate_prob=0.2,
                               constraints_range=dict(flops=args.flops), score_key="val_accuracy",
                               calibrate_fn=lambda m: calibrate_bn(m, calib), seed=seed, progress=False,
                               units="slimkit").run()


def run_seed(seed: int, args: argparse.Namespace, split: tuple) -> dict:
    x_tr, y_tr, x_val, y_val, x_test, y_test = split
    torch.manual_seed(seed)
    spos = SPOS(SearchableCNN())
    start = time.perf_counter()
    fit(spos, batches(x_tr, y_tr, 64, seed, args.supernet_epochs), loss=batch_loss, lr=args.lr, epochs=1, seed=seed,
        progress=False)
    t_super = time.perf_counter() - start
    calib = batches(x_tr, y_tr, 128, 99, 1)[:4]

    def score(model: nn.Module) -> float:
        return float((model(x_val, mode="predict") == y_val).float().mean())

    start = time.perf_counter()
    result = evolve(spos, score, x_tr[:1], calib, seed, args)
    t_search = time.perf_counter() - start
    x1, data = x_tr[:1], batches(x_tr, y_tr, 64, 1_000 + seed, args.retrain_epochs)
    start = time.perf_counter()
    evolved = accuracy(retrain(spos.architecture, result.best_subnet, data, seed, args.lr), x_test, y_test)
    t_retrain = time.perf_counter() - start
    randoms = random_subnets(spos.architecture, args.random, args.flops, x1, seed)
    rand_acc = [accuracy(retrain(spos.architecture, s, data, seed, args.lr), x_test, y_test) for s in randoms]
    rand_flops = [measure_subnet(spos.architecture, s, ["flops"], x1)["flops"] for s in randoms]
    by_flops = sorted(zip(rand_flops, rand_acc, strict=True))
    upper = [acc for _, acc in by_flops[len(by_flops) // 2:]]  # the random subnets that use the budget best
    return {"evolved": evolved, "random": rand_acc, "upper": upper, "evolved_flops": result.metrics["flops"],
            "random_flops": statistics.median(rand_flops), "supernet_val": result.best_score,
            "evaluated": result.evaluated, "seconds": (t_super, t_search, t_retrain)}


def shared_accuracy(algo: nn.Module, subnet: dict, calib: list, x: torch.Tensor, y: torch.Tensor) -> float:
    """Test accuracy of ``subnet`` with the supernet's shared weights, batch norms recalibrated, no retraining."""
    algo.set_subnet(subnet)
    calibrate_bn(algo, calib)
    return accuracy(export_subnet(algo, subnet), x, y)


def sandwich_seed(seed: int, args: argparse.Namespace, split: tuple) -> list[list[str]]:
    """One row per method: FLOPs, shared-weight and retrained test accuracy, supernet and search seconds."""
    x_tr, y_tr, x_val, y_val, x_test, y_test = split
    calib = batches(x_tr, y_tr, 128, 99, 1)[:4]
    train = batches(x_tr, y_tr, 64, seed, args.supernet_epochs)
    retrain_data = batches(x_tr, y_tr, 64, 1_000 + seed, args.retrain_epochs)

    def score(model: nn.Module) -> float:
        return float((model(x_val, mode="predict") == y_val).float().mean())

    rows = []
    for method in ("SPOS", "BigNAS", "AutoSlim"):
        torch.manual_seed(seed)
        if method == "AutoSlim":
            ratios = [i / 8 for i in range(1, 9)]
            mutator = dict(type="OneShotChannelMutator", channel_unit_cfg=dict(default_args=dict(
                candidate_choices=ratios, choice_mode="ratio")))
            algo = AutoSlim(zoo_build("digits_cnn"), mutator=mutator, input_shape=(1, 1, 8, 8))
        else:
            algo = SPOS(SearchableCNN()) if method == "SPOS" else BigNAS(SearchableCNN(), drop_path_rate=0.0)
        start = time.perf_counter()
        fit(algo, train, loss=batch_loss, lr=args.lr, epochs=1, seed=seed, progress=False)
        t_super, start = time.perf_counter() - start, time.perf_counter()
        if method == "AutoSlim":
            loop = GreedyChannelSearch(algo, args.flops, score, example_inputs=x_tr[:1], units="slimkit",
                                       calibrate_fn=lambda m: calibrate_bn(m, calib), progress=False)
            found = loop.run()[-1]
            subnet, flops = found.subnet, found.flops
        else:
            result = evolve(algo, score, x_tr[:1], calib, seed, args)
            subnet, flops = result.best_subnet, result.metrics["flops"]
        t_search = time.perf_counter() - start
        shared = shared_accuracy(algo, subnet, calib, x_test, y_test)
        retrained = accuracy(retrain(algo.architecture, subnet, retrain_data, seed, args.lr), x_test, y_test)
        params = sum(p.numel() for p in export_subnet(algo, subnet).parameters())
        rows.append([str(seed), method, f"{flops:,.0f}", f"{params:,}", f"{shared:.4f}", f"{retrained:.4f}",
                     f"{t_super:.0f} / {t_search:.0f}"])
        print(" | ".join(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flops", type=float, default=1e6)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--random", type=int, default=20)
    parser.add_argument("--supernet-epochs", type=int, default=30)
    parser.add_argument("--search-epochs", type=int, default=10)
    parser.add_argument("--retrain-epochs", type=int, default=15)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sandwich", action="store_true", help="SPOS vs BigNAS vs AutoSlim (see the module doc)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    x, y, x_test, y_test = digits_split()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, val = order[:1100], order[1100:]
    split = (x[train], y[train], x[val], y[val], x_test, y_test)
    print(machine_line(args.threads))
    if args.sandwich:
        print(f"FLOPs limit {args.flops:,.0f}; supernets {args.supernet_epochs} epochs, retrain {args.retrain_epochs} "
              f"epochs, lr {args.lr}\n")
        start = time.perf_counter()
        rows = [row for seed in args.seeds for row in sandwich_seed(seed, args, split)]
        print_table(["seed", "method", "subnet FLOPs", "params", "test acc, shared weights", "test acc, retrained",
                     "s: supernet / search"], rows)
        print(f"\n{time.perf_counter() - start:.0f} s in all")
        return
    print(f"FLOPs limit {args.flops:,.0f}; supernet {args.supernet_epochs} epochs, search {args.search_epochs} "
          f"epochs x 20 candidates, retrain {args.retrain_epochs} epochs, lr {args.lr}, {args.random} random subnets\n")
    rows, evolved, medians, uppers, start = [], [], [], [], time.perf_counter()
    for seed in args.seeds:
        r = run_seed(seed, args, split)
        med = statistics.median(r["random"])
        evolved.append(r["evolved"])
        medians.append(med)
        uppers.append(statistics.median(r["upper"]))
        rows.append([str(seed), f"{r['evolved']:.4f}", f"{med:.4f}", f"{uppers[-1]:.4f}",
                     f"{min(r['random']):.4f}-{max(r['random']):.4f}",
                     f"{r['evolved_flops']:,.0f}", f"{r['random_flops']:,.0f}", f"{r['supernet_val']:.3f}",
                     str(r["evaluated"]), " / ".join(f"{s:.0f}" for s in r["seconds"])])
    rows.append(["mean", f"{statistics.mean(evolved):.4f}", f"{statistics.mean(medians):.4f}",
                 f"{statistics.mean(uppers):.4f}", "", "", "", "", "", ""])
    print_table(["seed", "evolved test acc", "random median", "median, larger half", "random min-max", "evolved FLOPs",
                 "random median FLOPs", "supernet val acc", "evaluated", "s: supernet / search / retrain 1"], rows)
    gap = statistics.mean(evolved) - statistics.mean(medians)
    verdict = "at least as accurate as" if gap >= 0 else "LESS accurate than"
    print(f"\nevolved subnet is {verdict} the random median: {gap * 100:+.2f} points (mean of {len(args.seeds)} "
          f"seeds); {time.perf_counter() - start:.0f} s in all")


if __name__ == "__main__":
    main()
