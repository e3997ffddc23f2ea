"""Joint search (learning rate x sparsity x bits) against a compression-only search on the digits CNN.

Both searches run the same Auptimizer-shaped script experiment on slimkit's Optuna engine with the same budget,
proposer (NSGA-II) and seed. Each job loads the trained zoo ``digits_cnn``, prunes its convolutions with
``create_compressor`` (``l1_filter``, the trial's sparsity from ``config_list``), removes the pruned channels
(``apply_speedup``), fine-tunes for ``--epochs`` epochs with Adam while its conv/linear weights are fake-quantized
to the trial's bits (straight-through), freezes them on that grid, and reports ``print_result([accuracy, size_kb])``
(held-out accuracy on the zoo's 450-image test split; size = conv/linear weights at ``bits`` + everything else at
32 bits). The compression-only search fine-tunes with Adam's default learning rate (1e-3); the joint search also
searches it (log 1e-4 .. 3e-2). Printed: both Pareto fronts, their hypervolumes (accuracy x size saved, reference:
accuracy 0 and the unpruned model at 8 bits, the largest a trial makes) and how many points of each front the other
dominates.

    nice -n 10 .venv/bin/python benchmarks/joint_search_digits.py --n-samples 16 --seeds 0 1
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

SCRIPT = """import sys
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

import slimkit
from slimkit.zoo import digits_split, load


class FakeQuant(nn.Module):
    \"\"\"Symmetric per-output-channel rounding to `bits`, straight-through in the backward pass.\"\"\"

    def __init__(self, bits):
        super().__init__()
        self.levels = 2 ** (bits - 1) - 1

    def forward(self, w):
        scale = w.detach().flatten(1).abs().amax(1).clamp_min(1e-8) / self.levels
        scale = scale.view(-1, *([1] * (w.dim() - 1)))
        return w + (torch.round(w / scale).clamp(-self.levels, self.levels) * scale - w).detach()


def main(config):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = load("digits_cnn").model
    x, y, xt, yt = digits_split()
    compressor = slimkit.compression.create_compressor(model, config)
    compressor.compress()
    model = compressor.apply_speedup(dummy_input=torch.randn(1, 1, 8, 8))
    layers = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    for layer in layers:
        parametrize.register_parametrization(layer, "weight", FakeQuant(config["bits"]))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.get("lr", 1e-3))
    for _ in range(config["epochs"]):
        model.train()
        order = torch.randperm(len(x))
        for i in range(0, len(x), 64):
            idx = order[i:i + 64]
            optimizer.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()
    for layer in layers:
        parametrize.remove_parametrizations(layer, "weight", leave_parametrized=True)
    model.eval()
    with torch.no_grad():
        accuracy = float((model(xt).argmax(1) == yt).float().mean())
    quantized = sum(layer.weight.numel() for layer in layers)
    total = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    size_kb = (quantized * config["bits"] + (total - quantized) * 32) / 8 / 1024
    print(f"sparsity {config['config_list'][0]['sparsity']:.3f} bits {config['bits']} "
          f"lr {config.get('lr', 1e-3):.2e}: accuracy {accuracy:.4f}, {size_kb:.1f} KB")
    slimkit.print_result([accuracy, size_kb])


if __name__ == "__main__":
    main(slimkit.BasicConfig().load(sys.argv[1]))
"""

SPARSITY = {"range": [0.0, 0.9], "type": "float"}
BITS = {"name": "bits", "range": [2, 3, 4, 6, 8], "type": "choice"}
LR = {"name": "lr", "range": [1e-4, 3e-2], "type": "float", "log": True}


def experiment(name: str, joint: bool, args: argparse.Namespace, seed: int) -> dict:
    """One search: bits (and, jointly, the learning rate) in parameter_config, sparsity in config_list."""
    return {"name": name, "script": "prune_quant.py", "resource": "cpu", "proposer": "nsga2", "random_seed": seed,
            "n_samples": args.n_samples, "n_parallel": args.n_parallel,
            "objectives": {"accuracy": "max", "size_kb": "min"},
            "parameter_config": [BITS, LR] if joint else [BITS], "runtime_args": {"epochs": args.epochs},
            "compression": {"framework": "torch", "type": "pruning", "compressor": "l1_filter",
                            "config_list": [{"sparsity": SPARSITY, "op_types": ["Conv2d"]}]}}


def front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-dominated (accuracy max, size min) points, by size."""
    return sorted({p for p in points if not any(dominates(q, p) for q in points)}, key=lambda p: p[1])


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether ``a`` is at least as good as ``b`` in both and better in one (accuracy max, size min)."""
    return a[0] >= b[0] and a[1] <= b[1] and a != b


def hypervolume(points: list[tuple[float, float]], ref_size: float) -> float:
    """Area dominated by ``points`` in (accuracy from 0, size saved from ``ref_size``), as a fraction of 1 x 1."""
    area, best = 0.0, 0.0
    for accuracy, size in front(points):  # smallest model first: each adds the accuracy it gains over the smaller
        saved = max(0.0, 1.0 - size / ref_size)
        if accuracy > best:
            area += (accuracy - best) * saved
            best = accuracy
    return area


def base_sizes_kb() -> tuple[float, float]:
    """The digits CNN's size in float32 and with its conv/linear weights at 8 bits (the largest a trial makes)."""
    from torch import nn

    from slimkit.zoo import load

    model = load("digits_cnn").model
    total = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear)))
    return total * 4 / 1024, (weights * 8 + (total - weights) * 32) / 8 / 1024


def main() -> None:
    """Run both searches per seed; print the fronts, hypervolumes and dominance counts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=16)
    parser.add_argument("--n-parallel", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    print(machine_line(1))
    float_kb, ref = base_sizes_kb()
    summary = []
    with tempfile.TemporaryDirectory(prefix="slimkit-joint-") as tmp:
        folder = Path(tmp)
        (folder / "prune_quant.py").write_text(SCRIPT)
        for seed in args.seeds:
            fronts = {}
            for kind in ("compression-only", "joint"):
                name = f"{kind}_{seed}"
                path = folder / f"{name}.json"
                path.write_text(json.dumps(experiment(name, kind == "joint", args, seed)))
                started = time.perf_counter()
                result = run_experiment(path, quiet=True)
                failed = [r for r in result.rows if r["state"] != "complete"]
                if failed:
                    raise SystemExit(f"{name}: {len(failed)} trial(s) failed: {failed[0]['reason']}\n"
                                     f"{failed[0]['log_tail']}")
                points = [(r["values"]["accuracy"], r["values"]["size_kb"]) for r in result.rows]
                fronts[kind] = front(points)
                print(f"\nseed {seed}, {kind}: {len(points)} trials in {time.perf_counter() - started:.0f} s; front:")
                params = {(r["values"]["accuracy"], r["values"]["size_kb"]): r["params"] for r in result.rows}
                print_table(["accuracy", "size KB", "parameters"],
                            [[f"{a:.4f}", f"{s:.1f}", json.dumps(params[(a, s)], default=str)]
                             for a, s in fronts[kind]])
            plain, joint = fronts["compression-only"], fronts["joint"]
            summary.append([str(seed), f"{hypervolume(plain, ref):.4f}", f"{hypervolume(joint, ref):.4f}",
                            f"{sum(any(dominates(q, p) for q in joint) for p in plain)}/{len(plain)}",
                            f"{sum(any(dominates(q, p) for q in plain) for p in joint)}/{len(joint)}"])
    print(f"\n{args.n_samples} trials per search, NSGA-II, {args.epochs} fine-tuning epoch(s); float32 model "
          f"{float_kb:.1f} KB, 8-bit dense {ref:.1f} KB (the hypervolume's reference size)")
    print_table(["seed", "hypervolume compression-only", "hypervolume joint",
                 "compression-only points dominated by joint", "joint points dominated by compression-only"],
                summary)


if __name__ == "__main__":
    main()
