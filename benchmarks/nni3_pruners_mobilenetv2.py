"""NNI 3.0's L1NormPruner and TaylorPruner beside their NNI 2.x forms at 50 % on MobileNetV2 (ImageNet weights).

    PYTHONPATH=. .venv/bin/python benchmarks/nni3_pruners_mobilenetv2.py [--sparsity 0.5] [--steps 20]
        [--finetune-steps 150] [--lr 1e-3] [--threads 1] [--repeats 20]

The MobileNetV2 row of ``benchmarks/nni3_pruners.py``. Every conv is pruned to ``--sparsity`` of its filters with
coupled layers (residual adds, depthwise convs) sharing one choice: NNI 3.0's ``auto_set_denpendency_group_ids``
then ``L1NormPruner(model, config_list)`` / ``TaylorPruner(model, config_list, evaluator, training_steps)``, and
NNI 2.x's ``mode="dependency_aware"`` with ``dummy_input``. Taylor's statistics come from ``--steps`` batches of
8 photo crops in both forms. ``ModelSpeedup`` removes the channels, then every model gets the same short
fine-tune (``--finetune-steps`` Adam steps at ``--lr``, batch 8) against the dense model's top-1 class. The
ImageNet sample is scikit-image's photos (slimkit's offline ``Photos`` crops, as in
``groupfisher_mobilenetv2.py``): accuracy is top-1 / top-5 agreement with the dense model on the held-out photos'
crops. Latency: batch 1, 224x224, median of interleaved runs.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_latency, machine_line, print_table  # noqa: E402
from groupfisher_mobilenetv2 import agreement, batches, photos  # noqa: E402

from slimkit import trace  # noqa: E402
from slimkit.compression import ModelSpeedup, TaylorFOWeightPruner, TorchEvaluator  # noqa: E402
from slimkit.compression.pruning import L1NormPruner, TaylorPruner  # noqa: E402
from slimkit.compression.utils import auto_set_denpendency_group_ids  # noqa: E402
from slimkit.evaluation import count_parameters  # noqa: E402
from slimkit.zoo import load  # noqa: E402


def _step(batch: tuple[torch.Tensor, torch.Tensor], model: nn.Module) -> torch.Tensor:
    return nn.functional.cross_entropy(model(batch[0]), batch[1])


def _loop(data: list) -> object:
    def run(model: nn.Module, optimizer: torch.optim.Optimizer, step: object, schedulers: object,
            max_steps: int | None, max_epochs: int | None) -> None:
        model.train()
        for index in range(max_steps or len(data)):
            optimizer.zero_grad()
            step(data[index % len(data)], model).backward()  # type: ignore[operator]
            optimizer.step()
    return run


def prune(name: str, form: str, model: nn.Module, data: list, sparsity: float, steps: int) -> dict:
    dummy = data[0][0][:1]
    optimizer = trace(torch.optim.SGD)(model.parameters(), lr=1e-3, momentum=0.9)
    if form == "3.0":
        config = auto_set_denpendency_group_ids(model, [{"op_types": ["Conv2d"], "sparse_ratio": sparsity}], dummy)
        if name == "l1":
            pruner = L1NormPruner(model, config)
        else:
            evaluator = TorchEvaluator(_loop(data), optimizer, _step, dummy_input=dummy)
            pruner = TaylorPruner(model, config, evaluator, training_steps=steps)
    else:
        config = [{"sparsity_per_layer": sparsity, "op_types": ["Conv2d"]}]
        if name == "l1":
            pruner = L1NormPruner(model, config, mode="dependency_aware", dummy_input=dummy)
        else:
            def trainer(m: nn.Module, opt: torch.optim.Optimizer, criterion: object) -> None:
                _loop(data)(m, opt, lambda b, mm: criterion(mm(b[0]), b[1]), None, steps, None)  # type: ignore[operator]
            pruner = TaylorFOWeightPruner(model, config, trainer, optimizer, nn.functional.cross_entropy,
                                          training_batches=steps, mode="dependency_aware", dummy_input=dummy)
    _, masks = pruner.compress()
    pruner._unwrap_model()
    return masks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sparsity", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--finetune-steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    dense = load("mobilenet_v2").model.eval()
    x_train, x_held = photos()
    with torch.no_grad():
        labels = torch.cat([dense(x_train[i:i + 16]) for i in range(0, len(x_train), 16)]).argmax(1)
        reference = torch.cat([dense(x_held[i:i + 16]) for i in range(0, len(x_held), 16)])
    data = batches(x_train, labels, 8)
    print(machine_line(args.threads))
    print(f"sparsity {args.sparsity} of every conv (coupled layers share one choice), {args.steps} Taylor steps, "
          f"fine-tune {args.finetune_steps} Adam steps at lr {args.lr}, {len(x_train)} train crops\n")
    models, rows, kept = {"dense": dense}, {}, {}
    for name in ("l1", "taylor"):
        for form in ("3.0", "2.x"):
            torch.manual_seed(0)
            model = copy.deepcopy(dense)
            start = time.perf_counter()
            masks = prune(name, form, model, data, args.sparsity, args.steps)
            kept[(name, form)] = {k: v["weight"].bool() for k, v in masks.items()}
            ModelSpeedup(model, x_train[:1], masks).speedup_model()
            seconds = time.perf_counter() - start
            before = agreement(model, x_held, reference)[0]
            torch.manual_seed(0)
            optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
            _loop(data)(model, optimizer, _step, None, args.finetune_steps, None)
            top1, top5, _ = agreement(model, x_held, reference)
            key = f"{name} {form}"
            models[key] = model.eval()
            rows[key] = [key, f"{count_parameters(model) / 1e6:.2f}M", f"{before:.3f}", f"{top1:.3f}", f"{top5:.3f}",
                         f"{seconds:.0f}"]
            print(f"  {key}: pruned and sped up in {seconds:.0f} s", flush=True)
        same = all(torch.equal(kept[(name, "3.0")][k], kept[(name, "2.x")][k]) for k in kept[(name, "3.0")]) and \
            kept[(name, "3.0")].keys() == kept[(name, "2.x")].keys()
        for form in ("3.0", "2.x"):
            rows[f"{name} {form}"].append("yes" if same else "no")
    one = x_held[:1]
    latency = interleaved_latency({k: (lambda m=m: m(one)) for k, m in models.items()}, args.repeats, 3, args.threads)
    top1, top5, _ = agreement(dense, x_held, reference)
    table = [["dense", f"{count_parameters(dense) / 1e6:.2f}M", "-", f"{top1:.3f}", f"{top5:.3f}", "-", "-",
              f"{latency['dense']:.1f}"]]
    table += [[*row, f"{latency[key]:.1f}"] for key, row in rows.items()]
    print()
    print_table(["pruner (form)", "params", "top-1 as pruned", "top-1 after fine-tune", "top-5", "prune+speedup s",
                 "same masks", "ms / image"], table)


if __name__ == "__main__":
    main()
