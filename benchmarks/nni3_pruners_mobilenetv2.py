"""NNI 3.0's L1NormPruner and TaylorPruner beside their NNI 2.x forms at 50 % on MobileNetV2 (ImageNet weights).

    PYTHONPATH=. .venv/bin/python benchmarks/nni3_pruners_mobilenetv2.py [--sparsity 0.5] [--steps 20]
        [--finetune-steps 600] [--lr 1e-3] [--pool 1536] [--train-size 160] [--threads 1] [--repeats 20]

The MobileNetV2 row of ``benchmarks/nni3_pruners.py``. Every model starts from torchvision's pretrained ImageNet
weights (offline: ``zoo.load("mobilenet_v2")``). Every conv is pruned to ``--sparsity`` of its filters with coupled
layers (residual adds, depthwise convs) sharing one choice: NNI 3.0's ``auto_set_denpendency_group_ids`` then
``L1NormPruner(model, config_list)`` / ``TaylorPruner(model, config_list, evaluator, training_steps)``, and NNI
2.x's ``mode="dependency_aware"`` with ``dummy_input``. Taylor's statistics come from ``--steps`` batches of 8 photo
crops (the dense model's top-1 as labels) in both forms. ``ModelSpeedup`` removes the channels.

Recovery: every pruned model gets the same fine-tune, distillation from the dense model (KL divergence of the
logits at temperature ``--temperature``) for ``--finetune-steps`` Adam steps (batch 16, cosine-decayed ``--lr``)
over a pool of ``--pool`` random resized crops (``--train-size`` pixels, random flips) of the train photos of the
offline ImageNet sample (scikit-image's photos, split by photo as in ``slimkit.data.builtin.load_photo_splits``)
and scikit-learn's two sample photos; the dense model's logits of the pool are computed once. Accuracy is measured
on the held-out photos only (the validation and test photos' ten 224x224 crops each): top-1 / top-5 agreement with
the dense model's top-1 and the cosine of the logits (the photos carry no ImageNet labels). When the 3.0 and 2.x
forms keep the same channels their sped-up models are identical, so the fine-tune (seeded, deterministic) runs once
for them and both rows show it; ``--finetune-both`` runs it for each. Latency: batch 1, 224x224, median of
interleaved runs.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_latency, machine_line, print_table  # noqa: E402
from groupfisher_mobilenetv2 import MEAN, STD, agreement, batches, photos  # noqa: E402

from slimkit import trace  # noqa: E402
from slimkit.compression import ModelSpeedup, TaylorFOWeightPruner, TorchEvaluator  # noqa: E402
from slimkit.compression.pruning import L1NormPruner, TaylorPruner  # noqa: E402
from slimkit.compression.utils import auto_set_denpendency_group_ids  # noqa: E402
from slimkit.data.builtin import PHOTO_NAMES  # noqa: E402
from slimkit.data.images import to_chw_float  # noqa: E402
from slimkit.evaluation import count_parameters  # noqa: E402
from slimkit.zoo import load  # noqa: E402


def _step(batch: tuple[torch.Tensor, torch.Tensor], model: nn.Module) -> torch.Tensor:
    return F.cross_entropy(model(batch[0]), batch[1])


def _loop(data: list) -> object:
    def run(model: nn.Module, optimizer: torch.optim.Optimizer, step: object, schedulers: object,
            max_steps: int | None, max_epochs: int | None) -> None:
        model.train()
        for index in range(max_steps or len(data)):
            optimizer.zero_grad()
            step(data[index % len(data)], model).backward()  # type: ignore[operator]
            optimizer.step()
    return run


def train_photos() -> list[torch.Tensor]:
    """The whole train photos ([3, H, W] in [0, 1]): scikit-image's train split and scikit-learn's two samples."""
    from skimage import data as skimage_data
    from sklearn.datasets import load_sample_images

    names = [n for i, n in enumerate(PHOTO_NAMES) if i % 4 < 2]  # load_photo_splits' train photos
    images = [to_chw_float(getattr(skimage_data, n)()) for n in names]
    images += [to_chw_float(a) for a in load_sample_images().images]
    return [i.expand(3, -1, -1) if i.shape[0] == 1 else i[:3] for i in images]


def crop_pool(images: list[torch.Tensor], count: int, size: int, seed: int = 0) -> torch.Tensor:
    """``count`` random resized crops (8-100 % of the area, aspect 3/4-4/3, random flip), normalised."""
    generator = torch.Generator().manual_seed(seed)
    crops = []
    for index in range(count):
        image = images[index % len(images)]
        h, w = image.shape[1:]
        area = float(torch.empty(1).uniform_(0.08, 1.0, generator=generator)) * h * w
        ratio = math.exp(float(torch.empty(1).uniform_(math.log(3 / 4), math.log(4 / 3), generator=generator)))
        ch, cw = min(h, round(math.sqrt(area / ratio))), min(w, round(math.sqrt(area * ratio)))
        top = int(torch.randint(0, h - ch + 1, (1,), generator=generator))
        left = int(torch.randint(0, w - cw + 1, (1,), generator=generator))
        crop = F.interpolate(image[None, :, top:top + ch, left:left + cw], size=(size, size), mode="bilinear",
                             align_corners=False, antialias=True)
        crops.append(crop.flip(-1) if bool(torch.rand(1, generator=generator) < 0.5) else crop)
    return (torch.cat(crops).clamp(0, 1) - MEAN) / STD


def distill(model: nn.Module, pool: torch.Tensor, targets: torch.Tensor, steps: int, lr: float,
            temperature: float, batch: int = 16) -> None:
    """``steps`` Adam steps of KL(dense || model) on the pool's logits, cosine-decayed learning rate."""
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(0))
    model.train()
    for step in range(steps):
        index = order[(step * batch) % len(pool):][:batch]
        if len(index) < batch:
            index = torch.cat([index, order[:batch - len(index)]])
        logits = model(pool[index]) / temperature
        loss = F.kl_div(F.log_softmax(logits, 1), F.log_softmax(targets[index] / temperature, 1),
                        log_target=True, reduction="batchmean") * temperature ** 2
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()


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
            pruner = TaylorFOWeightPruner(model, config, trainer, optimizer, F.cross_entropy,
                                          training_batches=steps, mode="dependency_aware", dummy_input=dummy)
    _, masks = pruner.compress()
    pruner._unwrap_model()
    return masks


def _same_model(a: nn.Module, b: nn.Module) -> bool:
    one, two = a.state_dict(), b.state_dict()
    return one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sparsity", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--finetune-steps", type=int, default=600)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--temperature", type=float, default=2.0)
    parser.add_argument("--pool", type=int, default=1536)
    parser.add_argument("--train-size", type=int, default=160)
    parser.add_argument("--finetune-both", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    dense = load("mobilenet_v2").model.eval()
    x_train, x_held = photos()
    pool = crop_pool(train_photos(), args.pool, args.train_size)
    with torch.no_grad():
        labels = torch.cat([dense(x_train[i:i + 16]) for i in range(0, len(x_train), 16)]).argmax(1)
        reference = torch.cat([dense(x_held[i:i + 16]) for i in range(0, len(x_held), 16)])
        targets = torch.cat([dense(pool[i:i + 32]) for i in range(0, len(pool), 32)])
    data = batches(x_train, labels, 8)
    print(machine_line(args.threads))
    print(f"sparsity {args.sparsity} of every conv (coupled layers share one choice), {args.steps} Taylor steps; "
          f"fine-tune: {args.finetune_steps} Adam steps, lr {args.lr} (cosine), distillation at T={args.temperature} "
          f"on {args.pool} crops of {args.train_size}px; held-out: {len(x_held)} crops of 6 other photos\n")
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
            before = agreement(model, x_held, reference)
            key, twin = f"{name} {form}", f"{name} 3.0"
            start = time.perf_counter()
            if form == "3.0":
                untuned = copy.deepcopy(model)
            if form == "2.x" and not args.finetune_both and _same_model(model, untuned):
                model.load_state_dict(models[twin].state_dict())
                how = "as the 3.0 form's (identical model)"
            else:
                distill(model, pool, targets, args.finetune_steps, args.lr, args.temperature)
                how = f"{time.perf_counter() - start:.0f} s"
            top1, top5, cosine = agreement(model, x_held, reference)
            models[key] = model.eval()
            rows[key] = [key, f"{count_parameters(model) / 1e6:.2f}M", f"{before[0]:.3f}", f"{before[2]:.3f}",
                         f"{top1:.3f}", f"{top5:.3f}", f"{cosine:.3f}", f"{seconds:.0f}"]
            print(f"  {key}: pruned and sped up in {seconds:.0f} s, fine-tune {how}; top-1 {before[0]:.3f} -> "
                  f"{top1:.3f}", flush=True)
        same = kept[(name, "3.0")].keys() == kept[(name, "2.x")].keys() and \
            all(torch.equal(kept[(name, "3.0")][k], kept[(name, "2.x")][k]) for k in kept[(name, "3.0")])
        for form in ("3.0", "2.x"):
            rows[f"{name} {form}"].append("yes" if same else "no")
    one = x_held[:1]
    latency = interleaved_latency({k: (lambda m=m: m(one)) for k, m in models.items()}, args.repeats, 3, args.threads)
    top1, top5, cosine = agreement(dense, x_held, reference)
    table = [["dense", f"{count_parameters(dense) / 1e6:.2f}M", "-", "-", f"{top1:.3f}", f"{top5:.3f}",
              f"{cosine:.3f}", "-", "-", f"{latency['dense']:.1f}"]]
    table += [[*row, f"{latency[key]:.1f}"] for key, row in rows.items()]
    print()
    print_table(["pruner (form)", "params", "top-1 as pruned", "cos as pruned", "top-1 tuned", "top-5 tuned",
                 "cos tuned", "prune+speedup s", "same masks", "ms / image"], table)


if __name__ == "__main__":
    main()
