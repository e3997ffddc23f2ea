"""Each NNI 3.0 pruner at 50 % beside its NNI 2.x counterpart on the digits CNN: accuracy after a short fine-tune,
latency after the speedup.

    PYTHONPATH=. .venv/bin/python benchmarks/nni3_pruners.py [--sparsity 0.5] [--steps 40] [--threads 1]
        [--repeats 60] [--only l1 taylor ...]

Both forms prune the three convolutions of ``zoo.load("digits_cnn")`` (32/64/128 filters) to the same ratio:
NNI 3.0's ``(model, [{"sparse_ratio": s, "op_types": ["Conv2d"]}], evaluator, ...)`` through a
``TorchEvaluator`` and NNI 2.x's ``(model, [{"sparsity_per_layer": s, ...}], trainer, traced_optimizer,
criterion, ...)``. Where a pruner trains (Slim, Taylor, Movement, AGP) both forms get the same number of steps
(``--steps``) of the same SGD over the same batches. Slim ranks each BatchNorm after a conv (3.0 selects the convs,
2.x the norms); Movement prunes single weights in both forms (NNI 2.x has no channel granularity), so the speedup
cannot shrink it and its latency stays the dense model's. Then the layers are unwrapped, ``ModelSpeedup`` removes the
pruned channels, and every model is fine-tuned alike (one epoch of Adam, lr 3e-3, batch 64, seed 0). Accuracy on
the 450 held-out test images; latency: median ms of one batch of 256 images, every model timed round-robin
(benchmarks/common.py). "same masks" says whether the 3.0 and 2.x runs kept the same weights: they are the same
algorithms, so one-shot pruners must agree exactly.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from slimkit import trace, zoo
from slimkit.compression import ModelSpeedup, TaylorFOWeightPruner, TorchEvaluator
from slimkit.compression import pruning as v3
from slimkit.evaluation import count_parameters
from slimkit.zoo.digits_cnn import accuracy, digits_split

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_latency, machine_line, print_table  # noqa: E402

CONVS = ["features.0", "features.4", "features.8"]
NORMS = ["features.1", "features.5", "features.9"]
Batch = tuple[torch.Tensor, torch.Tensor]


def _batches(x: torch.Tensor, y: torch.Tensor, size: int = 64) -> list[Batch]:
    return [(x[i:i + size], y[i:i + size]) for i in range(0, len(x), size)]


def training_step(batch: Batch, model: nn.Module) -> torch.Tensor:
    """NNI 3.0's ``training_step(batch, model) -> loss``."""
    return nn.functional.cross_entropy(model(batch[0]), batch[1])


def training_func(batches: list[Batch]) -> Callable[..., None]:
    """NNI 3.0's ``training_func(model, optimizers, training_step, lr_schedulers, max_steps, max_epochs)``."""
    def run(model: nn.Module, optimizer: torch.optim.Optimizer, step: Callable[..., torch.Tensor], schedulers: object,
            max_steps: int | None, max_epochs: int | None) -> None:
        model.train()
        for index in range(max_steps or (max_epochs or 1) * len(batches)):
            optimizer.zero_grad()
            step(batches[index % len(batches)], model).backward()
            optimizer.step()
    return run


def trainer_for(batches: list[Batch], steps: int) -> Callable[..., None]:
    """NNI 2.x's ``trainer(model, optimizer, criterion)``: ``steps`` batches of the same data."""
    def trainer(model: nn.Module, optimizer: torch.optim.Optimizer, criterion: Callable[..., torch.Tensor]) -> None:
        model.train()
        for index in range(steps):
            data, target = batches[index % len(batches)]
            optimizer.zero_grad()
            criterion(model(data), target).backward()
            optimizer.step()
    return trainer


def run_v3(name: str, model: nn.Module, batches: list[Batch], sparsity: float, steps: int) -> dict:
    torch.manual_seed(0)
    optimizer = trace(torch.optim.SGD)(model.parameters(), lr=0.01, momentum=0.9)
    evaluator = TorchEvaluator(training_func(batches), optimizer, training_step, dummy_input=batches[0][0][:2])
    config = [{"sparse_ratio": sparsity, "op_types": ["Conv2d"]}]
    if name in ("level", "l1", "l2", "fpgm"):
        cls = {"level": v3.LevelPruner, "l1": v3.L1NormPruner, "l2": v3.L2NormPruner, "fpgm": v3.FPGMPruner}[name]
        pruner = cls(model, config, evaluator)
        pruner.compress()
    elif name == "slim":
        # NNI 3.0's penalty is regular_scale * mean over the layers of |gamma|_1: 3e-4 over 3 norms is 2.x's 1e-4 sum
        pruner = v3.SlimPruner(model, [{"sparse_ratio": sparsity, "op_names": CONVS}], evaluator, steps,
                               regular_scale=3e-4)
        pruner.compress()
    elif name == "taylor":
        pruner = v3.TaylorPruner(model, config, evaluator, training_steps=steps)
        pruner.compress()
    elif name == "agp":
        sub = v3.L1NormPruner(model, config, evaluator)
        scheduled = v3.AGPPruner(sub, interval_steps=steps // 4, total_times=4)
        scheduled.compress()
        return {"masks": scheduled.get_masks(), "unwrap": scheduled.unwrap_model}
    else:  # movement
        pruner = v3.MovementPruner(model, config, evaluator, warmup_step=steps // 4,
                                   cooldown_begin_step=3 * steps // 4)
        pruner.compress(max_steps=steps, max_epochs=None)
    return {"masks": _v2(pruner), "unwrap": pruner._unwrap_model}


def run_v2(name: str, model: nn.Module, batches: list[Batch], sparsity: float, steps: int) -> dict:
    torch.manual_seed(0)
    optimizer = trace(torch.optim.SGD)(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.functional.cross_entropy
    config = [{"sparsity_per_layer": sparsity, "op_types": ["Conv2d"]}]
    if name in ("level", "l1", "l2", "fpgm"):
        cls = {"level": v3.LevelPruner, "l1": v3.L1NormPruner, "l2": v3.L2NormPruner, "fpgm": v3.FPGMPruner}[name]
        pruner = cls(model, config)
    elif name == "slim":
        pruner = v3.SlimPruner(model, [{"sparsity_per_layer": sparsity, "op_names": NORMS}],
                               trainer_for(batches, steps), optimizer, criterion, training_epochs=1, scale=1e-4,
                               mode="normal")
    elif name == "taylor":
        pruner = TaylorFOWeightPruner(model, config, trainer_for(batches, steps), optimizer, criterion,
                                      training_batches=steps)
    elif name == "agp":
        pruner = v3.AGPPruner(model, config, "l1", total_iteration=4,
                              finetuner=lambda m: trainer_for(batches, steps // 4)(m, optimizer, criterion))
        pruner.compress()
        _, best, masks, _, _ = pruner.get_best_result()
        model.load_state_dict(best.state_dict())
        return {"masks": masks, "unwrap": lambda: None}
    else:  # movement
        pruner = v3.MovementPruner(model, [{"sparsity_per_layer": sparsity, "op_types": ["Conv2d"]}],
                                   trainer_for(batches, steps), optimizer, criterion, training_epochs=1,
                                   warm_up_step=steps // 4, cool_down_beginning_step=3 * steps // 4)
    _, masks = pruner.compress()
    return {"masks": masks, "unwrap": pruner._unwrap_model}


def _v2(pruner: object) -> dict:
    return {name: {"weight": m["weight_mask"], **({"bias": m["bias_mask"]} if m["bias_mask"] is not None else {})}
            for name, m in pruner.get_masks().items()}  # type: ignore[attr-defined]


def fine_tune(model: nn.Module, batches: list[Batch]) -> nn.Module:
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    training_func(batches)(model, optimizer, training_step, None, None, 1)
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sparsity", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=40, help="training steps of the pruners that train")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--only", nargs="*", default=["level", "l1", "l2", "fpgm", "slim", "taylor", "agp",
                                                       "movement"])
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    x, y, x_test, y_test = digits_split()
    batches = _batches(x, y)
    dense = zoo.load("digits_cnn").model.eval()
    example = x_test[:256]
    print(machine_line(args.threads))
    print(f"sparsity {args.sparsity} of each conv, {args.steps} pruning steps where the pruner trains, then "
          "1 epoch of Adam (lr 3e-3, batch 64)\n")
    models: dict[str, nn.Module] = {"dense": dense}
    rows: dict[str, list[str]] = {}
    for name in args.only:
        kept = {}
        for form, run in (("3.0", run_v3), ("2.x", run_v2)):
            model = copy.deepcopy(dense)
            start = time.perf_counter()
            result = run(name, model, batches, args.sparsity, args.steps)
            seconds = time.perf_counter() - start
            result["unwrap"]()
            masks = result["masks"]
            kept[form] = {k: v["weight"].bool() for k, v in masks.items()}
            ModelSpeedup(model, example[:2], masks).speedup_model()
            as_pruned = accuracy(model.eval(), x_test, y_test)
            fine_tune(model, batches)
            key = f"{name} {form}"
            models[key] = model
            rows[key] = [key, f"{count_parameters(model) / 1e3:.1f}k", f"{as_pruned:.3f}",
                         f"{accuracy(model, x_test, y_test):.3f}", f"{seconds:.1f}"]
            print(f"  {key}: pruned in {seconds:.1f} s", flush=True)
        same = kept["3.0"].keys() == kept["2.x"].keys() and all(torch.equal(kept["3.0"][k], kept["2.x"][k])
                                                                for k in kept["3.0"])
        for form in ("3.0", "2.x"):
            rows[f"{name} {form}"].append("yes" if same else "no")
    latency = interleaved_latency({k: (lambda m=m: m(example)) for k, m in models.items()}, args.repeats, 5,
                                  args.threads)
    table = [["dense", f"{count_parameters(dense) / 1e3:.1f}k", "-", f"{accuracy(dense, x_test, y_test):.3f}", "-",
              "-", f"{latency['dense']:.2f}"]]
    table += [[*row, f"{latency[key]:.2f}"] for key, row in rows.items()]
    print()
    print_table(["pruner (form)", "params", "acc as pruned", "acc after fine-tune", "prune s", "same masks",
                 "ms / 256 imgs"], table)


if __name__ == "__main__":
    main()
