"""GroupFisher vs l1_filter vs Torch-Pruning at equal MACs on MobileNetV2 (ImageNet weights), offline.

    .venv/bin/python benchmarks/groupfisher_mobilenetv2.py [--targets 0.5,0.7] [--finetune-steps 150] [--threads 2]

For each MACs target:

1. GroupFisher (slimkit's ``group_fisher`` engine through the razor face's ``GroupFisherAlgorithm``) prunes while
   training on the Photos train crops until the estimated MACs reach the target, ``--per-prune`` channels per
   pruning, then deploys (physically smaller).
2. slimkit ``l1_filter`` (dependency-aware, through ``smash``) and Torch-Pruning's L1 ``MetaPruner`` are bisected
   on their sparsity until their MACs match GroupFisher's (within 1 %).
3. Every pruned model gets the same fine-tune (``--finetune-steps`` Adam steps at ``--lr``, batch ``--batch``):
   distillation (KL at T=2) from the dense model's logits on the train crops, random horizontal flips.

"Accuracy" is top-1 / top-5 agreement with the dense model's ImageNet top-1 class on the crops of the held-out
photos (and the mean cosine of the logits to the dense logits): the ImageNet-sample here is scikit-image's photos
(slimkit's ``Photos`` data: ten 224x224 crops of each, split by photo), which carry no ImageNet labels. Latency:
batch 1 and batch 8, 224x224, every model timed round-robin (alternating order) on ``--threads``; "speedup" is the
median over rounds of dense time / model time in the same round (load hits both alike). Each pruned model is
checked to be smaller and faster (a line says so when it is not); its conv widths off the 8 and 16 grids are counted.
``--channels-last`` times every model (dense included) on channels_last weights and inputs: in the default NCHW
layout oneDNN reorders each conv's activations to 16-channel blocks and back, which pruned widths that are not a
multiple of 16 do not make cheaper (see the issue-36 note in docs/benchmarks.md). ``--round-to N`` makes all three
keep a multiple of N channels in every coupled group (GroupFisher once pruning stops, ``l1_filter_round_to``,
Torch-Pruning's ``round_to``): 16 puts every width on oneDNN's block grid.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # a spinning OpenMP thread starves its partner on 2 shared cores

import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_samples, machine_line, print_table  # noqa: E402

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


def group_fisher(model: nn.Module, data: list, target: float, per_prune: int, max_steps: int,
                 round_to: int = 1) -> tuple[nn.Module, dict]:
    algo = build(dict(type="GroupFisherAlgorithm", architecture=copy.deepcopy(model), interval=1,
                      target_flop_ratio=target,
                      mutator=dict(type="GroupFisherChannelMutator",
                                   parse_cfg=dict(type="ChannelAnalyzer", demo_input=(1, 3, 224, 224)),
                                   channel_unit_cfg=dict(type="GroupFisherChannelUnit",
                                                         default_args=dict(normalization_type="flops")))))
    algo.pruner.channels_per_prune, algo.pruner.round_to = per_prune, round_to
    optimizer = torch.optim.Adam(algo.parameters(), lr=1e-4)
    steps = 0
    while not algo.pruner.done() and steps < max_steps:  # one step at a time: stop as soon as the target is met
        fit(algo, [data[steps % len(data)]], loss=batch_loss, optimizer=optimizer, steps=1, progress=False)
        steps += 1
    info = {"steps": steps, "pruned": len(algo.pruner.history), "estimated": algo.units.macs_ratio()}
    return algo.deploy().eval(), info


def l1_filter(model: nn.Module, x: torch.Tensor, sparsity: float, round_to: int = 1) -> nn.Module:
    cfg = SmashConfig()
    cfg["pruner"] = "l1_filter"
    cfg["l1_filter_sparsity"] = sparsity
    cfg["l1_filter_round_to"] = round_to
    cfg.add_example_inputs(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return smash(copy.deepcopy(model), cfg, experimental=True).model.eval()


def torch_pruning(model: nn.Module, x: torch.Tensor, ratio: float, round_to: int = 1) -> nn.Module:
    import torch_pruning as tp

    pruned = copy.deepcopy(model)
    pruner = tp.pruner.MetaPruner(pruned, x, importance=tp.importance.MagnitudeImportance(p=1),
                                  pruning_ratio=ratio, ignored_layers=[pruned.classifier[1]],
                                  round_to=round_to if round_to > 1 else None)
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


def kd_loss(temperature: float):
    """Distillation from the dense model's logits (the batch's targets): KL at ``temperature``, times T^2."""

    def loss(net: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, teacher = batch
        if torch.rand(()) < 0.5:  # horizontal flip: the dense logits of a flipped crop are close enough
            x = x.flip(3)
        log_p = torch.log_softmax(net(x) / temperature, dim=1)
        return torch.nn.functional.kl_div(log_p, torch.log_softmax(teacher / temperature, dim=1), log_target=True,
                                          reduction="batchmean") * temperature ** 2

    return loss


def finetune(model: nn.Module, data: list, steps: int, lr: float) -> nn.Module:
    fit(model, data, loss=kd_loss(2.0), steps=steps, lr=lr, progress=False, seed=0)
    return model.eval()


def paired_latency(models: dict[str, nn.Module], x: torch.Tensor, repeats: int, threads: int,
                   channels_last: bool = False) -> dict:
    """{name: (median ms, median of the per-round dense/model time ratios)}; rounds interleave every model.
    With ``channels_last`` every model runs on channels_last copies of its weights and of ``x``."""
    if channels_last:
        models = {k: copy.deepcopy(m).to(memory_format=torch.channels_last) for k, m in models.items()}
        x = x.contiguous(memory_format=torch.channels_last)
    samples = interleaved_samples({k: (lambda m=m: m(x)) for k, m in models.items()}, repeats=repeats, warmup=3,
                                  threads=threads)
    dense = samples["dense"]
    return {k: (statistics.median(v), statistics.median(d / t for d, t in zip(dense, v, strict=True)))
            for k, v in samples.items()}


def conv_widths(model: nn.Module) -> list[int]:
    return [m.out_channels for m in model.modules() if isinstance(m, nn.Conv2d)]


def run_target(dense: nn.Module, target: float, data: list, kd_data: list, x_test: torch.Tensor,
               ref_test: torch.Tensor, args: argparse.Namespace) -> list[str]:
    x1 = data[0][0][:1]
    dense_macs = count_macs(dense, x1)
    t = time.perf_counter()
    gf, info = group_fisher(dense, data, target, args.per_prune, args.prune_steps, args.round_to)
    gf_macs = count_macs(gf, x1)
    print(f"[{target}] group_fisher: {info['steps']} steps, {info['pruned']} channels, MACs "
          f"{gf_macs / dense_macs:.3f} of dense (estimated {info['estimated']:.3f}), {time.perf_counter() - t:.0f} s",
          flush=True)
    l1, l1_s = matched(lambda s: l1_filter(dense, x1, s, args.round_to), gf_macs, x1)
    tp_model, tp_r = matched(lambda r: torch_pruning(dense, x1, r, args.round_to), gf_macs, x1)
    models = {"dense": dense, "group_fisher": gf, f"l1_filter (sparsity {l1_s:.3f})": l1,
              f"Torch-Pruning L1 (ratio {tp_r:.3f})": tp_model}
    before = {k: agreement(m, x_test, ref_test) for k, m in models.items()}
    for name, model in models.items():
        if name != "dense":
            t = time.perf_counter()
            finetune(model, kd_data, args.finetune_steps, args.lr)
            print(f"[{target}] fine-tuned {name}: {time.perf_counter() - t:.0f} s", flush=True)
    after = {k: agreement(m, x_test, ref_test) for k, m in models.items()}
    lat1 = paired_latency(models, x1, args.repeats, args.threads, args.channels_last)
    lat8 = paired_latency(models, data[0][0][:8], max(args.repeats // 3, 5), args.threads, args.channels_last)
    rows, notes = [], []
    dense_params = count_parameters(dense)
    for name, model in models.items():
        macs, params = count_macs(model, x1), count_parameters(model)
        rows.append([name, f"{params / 1e6:.2f}", f"{macs / 1e6:.0f}", f"{macs / dense_macs:.3f}",
                     f"{before[name][0]:.3f}", f"{before[name][2]:.3f}", f"{after[name][0]:.3f}",
                     f"{after[name][1]:.3f}", f"{after[name][2]:.3f}",
                     f"{lat1[name][0]:.1f}", f"{lat1[name][1]:.2f}x", f"{lat8[name][0]:.0f}", f"{lat8[name][1]:.2f}x"])
        if name == "dense":
            continue
        if params >= dense_params:
            notes.append(f"NOT SMALLER: {name} has {params} parameters (dense {dense_params})")
        if lat1[name][1] <= 1.0 or lat8[name][1] <= 1.0:
            notes.append(f"NOT FASTER: {name} batch-1 {lat1[name][1]:.2f}x, batch-8 {lat8[name][1]:.2f}x")
        for grid in (8, 16):
            odd = sum(w % grid != 0 for w in conv_widths(model))
            notes.append(f"{name}: {odd} of {len(conv_widths(model))} conv widths not a multiple of {grid}")
    print(f"\nMobileNetV2 (ImageNet weights) at {target} of the MACs, {len(x_test)} held-out photo crops; fine-tune "
          f"{args.finetune_steps} steps x batch {args.batch} (distillation from the dense logits, lr {args.lr})")
    print_table(["model", "params M", "MMACs", "MACs ratio", "top-1 pruned", "cos pruned", "top-1 tuned",
                 "top-5 tuned", "cos tuned", "b1 ms", "b1 speedup", "b8 ms", "b8 speedup"], rows)
    for note in notes:
        print("  " + note)
    return notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default="0.5,0.7", help="MACs shares GroupFisher prunes to (comma-separated)")
    parser.add_argument("--per-prune", type=int, default=128, help="channels GroupFisher removes per pruning step")
    parser.add_argument("--prune-steps", type=int, default=80, help="cap on GroupFisher's pruning steps")
    parser.add_argument("--finetune-steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=3e-4, help="fine-tune learning rate (Adam)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--round-to", type=int, default=1,
                        help="every coupled channel group keeps a multiple of this many channels (all three methods)")
    parser.add_argument("--channels-last", action="store_true",
                        help="time every model on channels_last weights and inputs (default: NCHW)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    start = time.perf_counter()
    print(machine_line(args.threads))
    print(f"round_to {args.round_to}, channels_last {args.channels_last}")
    dense = load("mobilenet_v2").model.eval()
    x_train, x_test = photos()
    with torch.no_grad():
        logits_train = torch.cat([dense(x_train[i:i + 16]) for i in range(0, len(x_train), 16)])
        ref_test = torch.cat([dense(x_test[i:i + 16]) for i in range(0, len(x_test), 16)])
    data = batches(x_train, logits_train.argmax(1), args.batch)
    kd_data = batches(x_train, logits_train, args.batch)
    for target in (float(t) for t in args.targets.split(",")):
        run_target(dense, target, data, kd_data, x_test, ref_test, args)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
