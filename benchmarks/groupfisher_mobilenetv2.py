"""GroupFisher vs l1_filter vs Torch-Pruning at equal MACs on MobileNetV2 (ImageNet weights), offline.

    .venv/bin/python benchmarks/groupfisher_mobilenetv2.py [--target 0.6] [--finetune-steps 30] [--threads 2]

1. GroupFisher (slimkit's ``group_fisher`` engine through the razor face's ``GroupFisherAlgorithm``) prunes while
   training on the Photos train crops until the estimated MACs reach ``--target``, ``--per-prune`` channels per
   pruning, then deploys (physically smaller).
2. slimkit ``l1_filter`` (dependency-aware, through ``smash``) and Torch-Pruning's L1 ``MetaPruner`` are bisected
   on their sparsity until their MACs match GroupFisher's (within 1 %).
3. Every pruned model gets the same short fine-tune (``--finetune-steps`` Adam steps on the train crops) against
   the dense model's ImageNet top-1 labels, then is scored on the crops of the held-out photos.

"Accuracy" is top-1 / top-5 agreement with the dense model's ImageNet top-1 class on the held-out crops (and
the mean cosine of the logits to the dense logits, which still ranks the methods when top-1 has collapsed): the
ImageNet-sample here is scikit-image's photos (slimkit's ``Photos`` data: ten 224x224 crops of each, split by
photo), which carry no ImageNet labels. Latency: batch 1, 224x224, median of interleaved runs on ``--threads``.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # a spinning OpenMP thread starves its partner on 2 shared cores

import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_latency, machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, smash  # noqa: E402
from slimkit.data.builtin import load_photo_splits  # noqa: E402
from slimkit.evaluation import count_macs, count_parameters  # noqa: E402
from slimkit.razor import batch_loss, build  # noqa: E402
from slimkit.training import fit  # noqa: E402
from slimkit.zoo import load  # noqa: E402

MEAN = torch.tensor((0.485, 0.456, 0.406)).view(1, 3, 1, 1)
STD = torch.tensor((0.229, 0.224, 0.225)).view(1, 3, 1, 1)


def photos() -> tuple[torch.Tensor, torch.Tensor]:
    """(train crops, held-out crops: the validation and test photos'), normalised the ImageNet way."""
    train, val, test = load_photo_splits()

    def stack(ds) -> torch.Tensor:
        return (torch.stack([ds[i]["image"] for i in range(len(ds))]) - MEAN) / STD

    return stack(train), torch.cat([stack(val), stack(test)])


def batches(x: torch.Tensor, y: torch.Tensor, size: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    return [(x[order[i:i + size]], y[order[i:i + size]]) for i in range(0, len(x), size)]


@torch.no_grad()
def agreement(model: nn.Module, x: torch.Tensor, reference: torch.Tensor) -> tuple[float, float, float]:
    """(top-1 agreement, top-5 agreement with the dense top-1, mean cosine of the logits to the dense logits)."""
    model.eval()
    logits = torch.cat([model(x[i:i + 16]) for i in range(0, len(x), 16)])
    labels = reference.argmax(1)
    top5 = logits.topk(5, dim=1).indices
    cosine = torch.nn.functional.cosine_similarity(logits, reference, dim=1).mean()
    return (float((top5[:, 0] == labels).float().mean()), float((top5 == labels[:, None]).any(1).float().mean()),
            float(cosine))


def group_fisher(model: nn.Module, data: list, target: float, per_prune: int, max_steps: int) -> tuple[nn.Module, dict]:
    algo = build(dict(type="GroupFisherAlgorithm", architecture=copy.deepcopy(model), interval=1,
                      target_flop_ratio=target,
                      mutator=dict(type="GroupFisherChannelMutator",
                                   parse_cfg=dict(type="ChannelAnalyzer", demo_input=(1, 3, 224, 224)),
                                   channel_unit_cfg=dict(type="GroupFisherChannelUnit",
                                                         default_args=dict(normalization_type="flops")))))
    algo.pruner.channels_per_prune = per_prune
    optimizer = torch.optim.Adam(algo.parameters(), lr=1e-4)
    steps = 0
    while not algo.pruner.done() and steps < max_steps:  # one step at a time: stop as soon as the target is met
        fit(algo, [data[steps % len(data)]], loss=batch_loss, optimizer=optimizer, steps=1, progress=False)
        steps += 1
    info = {"steps": steps, "pruned": len(algo.pruner.history), "estimated": algo.units.macs_ratio()}
    return algo.deploy().eval(), info


def l1_filter(model: nn.Module, x: torch.Tensor, sparsity: float) -> nn.Module:
    cfg = SmashConfig()
    cfg["pruner"] = "l1_filter"
    cfg["l1_filter_sparsity"] = sparsity
    cfg.add_example_inputs(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return smash(copy.deepcopy(model), cfg, experimental=True).model.eval()


def torch_pruning(model: nn.Module, x: torch.Tensor, ratio: float) -> nn.Module:
    import torch_pruning as tp

    pruned = copy.deepcopy(model)
    pruner = tp.pruner.MetaPruner(pruned, x, importance=tp.importance.MagnitudeImportance(p=1),
                                  pruning_ratio=ratio, ignored_layers=[pruned.classifier[1]])
    pruner.step()
    return pruned.eval()


def matched(prune, goal: float, x: torch.Tensor, lo: float = 0.0, hi: float = 0.9, rounds: int = 8) -> tuple:
    """Bisect the sparsity so the pruned MACs are within 1 % of ``goal``; (model, sparsity)."""
    best = None
    for _ in range(rounds):
        mid = (lo + hi) / 2
        model = prune(mid)
        macs = count_macs(model, x)
        if best is None or abs(macs - goal) < abs(best[2] - goal):
            best = (model, mid, macs)
        if abs(macs - goal) / goal < 0.01:
            break
        lo, hi = (mid, hi) if macs > goal else (lo, mid)
    return best[0], best[1]


def finetune(model: nn.Module, data: list, steps: int) -> nn.Module:
    fit(model, data, steps=steps, lr=1e-4, progress=False, seed=0)
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=float, default=0.7, help="MACs share GroupFisher prunes to")
    parser.add_argument("--per-prune", type=int, default=128, help="channels GroupFisher removes per pruning step")
    parser.add_argument("--prune-steps", type=int, default=60, help="cap on GroupFisher's pruning steps")
    parser.add_argument("--finetune-steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    start = time.perf_counter()
    print(machine_line(args.threads))
    dense = load("mobilenet_v2").model.eval()
    x_train, x_test = photos()
    with torch.no_grad():
        y_train = torch.cat([dense(x_train[i:i + 16]).argmax(1) for i in range(0, len(x_train), 16)])
        ref_test = torch.cat([dense(x_test[i:i + 16]) for i in range(0, len(x_test), 16)])
    data = batches(x_train, y_train, args.batch)
    x1 = x_train[:1]
    dense_macs = count_macs(dense, x1)

    t = time.perf_counter()
    gf, info = group_fisher(dense, data, args.target, args.per_prune, args.prune_steps)
    gf_macs = count_macs(gf, x1)
    print(f"group_fisher: {info['steps']} steps, {info['pruned']} channels, MACs {gf_macs / dense_macs:.3f} of dense "
          f"(estimated {info['estimated']:.3f}), {time.perf_counter() - t:.0f} s")
    l1, l1_s = matched(lambda s: l1_filter(dense, x1, s), gf_macs, x1)
    tp_model, tp_r = matched(lambda r: torch_pruning(dense, x1, r), gf_macs, x1)
    models = {"dense": dense, "group_fisher": gf, f"l1_filter (sparsity {l1_s:.3f})": l1,
              f"Torch-Pruning L1 (ratio {tp_r:.3f})": tp_model}
    before = {k: agreement(m, x_test, ref_test) for k, m in models.items()}
    for name, model in models.items():
        if name != "dense":
            finetune(model, data, args.finetune_steps)
    after = {k: agreement(m, x_test, ref_test) for k, m in models.items()}
    lat = interleaved_latency({k: (lambda m=m: m(x1)) for k, m in models.items()}, repeats=args.repeats, warmup=3,
                              threads=args.threads)
    rows = []
    for name, model in models.items():
        macs = count_macs(model, x1)
        rows.append([name, f"{count_parameters(model) / 1e6:.2f}", f"{macs / 1e6:.0f}", f"{macs / dense_macs:.3f}",
                     f"{before[name][0]:.3f}", f"{before[name][2]:.3f}", f"{after[name][0]:.3f}",
                     f"{after[name][1]:.3f}", f"{after[name][2]:.3f}",
                     f"{lat[name]:.1f}", f"{lat['dense'] / lat[name]:.2f}x"])
    print(f"\nMobileNetV2 (ImageNet weights), {len(x_test)} held-out photo crops; "
          f"fine-tune {args.finetune_steps} steps "
          f"x batch {args.batch}")
    print_table(["model", "params M", "MMACs", "MACs ratio", "top-1 pruned", "cos pruned", "top-1 tuned",
                 "top-5 tuned", "cos tuned", "latency ms", "speedup"], rows)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
