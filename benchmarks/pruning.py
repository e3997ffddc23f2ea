"""Channel pruning + speedup: slimkit vs Torch-Pruning at the same channel ratio and importance, in one run.

    .venv/bin/python benchmarks/pruning.py [--repeats 12] [--warmup 2] [--threads 2] [--batch 8] [--device cpu]
                                           [--only all|cnn|transformers]

Transformers (``--only transformers``; see ``benchmarks/pruning_transformers.py``): ViT-B/16- and
BERT-base-shaped models pruned 50% by slimkit's default ``l1_filter`` (MLP channels, whole heads, hidden width)
and by Torch-Pruning, at the same parameter count, timed in the same run on the CPU.

``--device cuda`` prunes on the CPU as usual, then times every variant on the GPU (each call ends with
``torch.cuda.synchronize()``); the digits part stays on the CPU.

Models: MobileNetV2 (real ImageNet weights from the zoo) and a ResNet-18-shaped CNN (BasicBlock x[2,2,2,2],
widths 64-128-256-512, ImageNet stem, seeded random init), 224x224 inputs, batch 8. Every Conv2d output
channel is pruned (stem, blocks, shortcuts; the classifier is left alone) at 30% and 50%, ranked by the L1
norm of the filters:

* slimkit: ``create_compressor(model, "l1_filter", ..., dummy_input=x)`` -> ``compress()`` -> ``apply_speedup()``;
  dependency-aware (the default when an input is given): coupled layers (residual streams, expand + depthwise)
  share one mask chosen by their summed L1 norms.
* slimkit per-layer ``l1_filter`` with ``dependency_aware=False`` (ResNet-18 at 50% only): each conv ranked on its
  own, as NNI does by default; shows how little of the residual streams the speedup can then remove.
* Torch-Pruning ``tp.pruner.MetaPruner`` with ``tp.importance.MagnitudeImportance(p=1)``, same ratio, classifier
  ignored.

Prints parameters, MACs, conv channels kept, latency (median of interleaved runs) and speedup vs dense, and
output cosine vs the dense model. A second copy of the dense model is timed too: its "speedup" shows the timing
noise of the machine (slimkit's and Torch-Pruning's 50% models have identical layer shapes, so any latency gap
between them is noise). Then prunes the digits CNN 50% with L1 filters + speedup and fine-tunes it
3 epochs to show accuracy recovering to within 1 point of dense.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import warnings
from pathlib import Path

# On a shared 2-core machine an OpenMP thread that spins at a barrier starves its descheduled partner: with the
# default (active) wait policy 2-thread runs got ~10x slower and every model took the same time. Passive waiting
# keeps timings proportional to the work. Set before torch loads OpenMP; an explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_latency, machine_line, print_table  # noqa: E402
from pruning_transformers import run as run_transformers  # noqa: E402

from slimkit import zoo  # noqa: E402
from slimkit.evaluation import count_macs, count_parameters  # noqa: E402
from slimkit.faces.auptimizer import create_compressor  # noqa: E402


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    """ResNet-18 layout: 7x7/2 stem + 3x3/2 max-pool, four stages of two BasicBlocks, global pool, fc."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], 64
        for i, width in enumerate((64, 128, 256, 512)):
            stages.append(nn.Sequential(BasicBlock(cin, width, 1 if i == 0 else 2), BasicBlock(width, width, 1)))
            cin = width
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build_resnet18(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return ResNet18().eval()


def slimkit_prune(model: nn.Module, x: torch.Tensor, sparsity: float, dependency_aware: bool) -> nn.Module:
    config = {"compression": {"framework": "torch", "type": "pruning", "compressor": "l1_filter",
                              "config_list": [{"sparsity": sparsity, "op_types": ["Conv2d"]}]}}
    comp = create_compressor(copy.deepcopy(model), config, dummy_input=x[:1], dependency_aware=dependency_aware)
    comp.compress()
    with warnings.catch_warnings():  # per-layer l1_filter warns about every coupled channel it could not remove
        warnings.simplefilter("ignore")
        return comp.apply_speedup().eval()


def torch_pruning_prune(model: nn.Module, x: torch.Tensor, sparsity: float, classifier: str) -> nn.Module:
    import torch_pruning as tp

    pruned = copy.deepcopy(model)
    pruner = tp.pruner.MetaPruner(pruned, x[:1], importance=tp.importance.MagnitudeImportance(p=1),
                                  pruning_ratio=sparsity, ignored_layers=[pruned.get_submodule(classifier)])
    pruner.step()
    return pruned.eval()


def conv_shapes(model: nn.Module) -> list[tuple[int, ...]]:
    return [tuple(m.weight.shape) for m in model.modules() if isinstance(m, nn.Conv2d)]


def conv_channels(model: nn.Module) -> int:
    return sum(m.out_channels for m in model.modules() if isinstance(m, nn.Conv2d))


def benchmark_model(title: str, model: nn.Module, x: torch.Tensor, classifier: str, args: argparse.Namespace,
                    per_layer_at: float | None) -> dict[str, float]:
    variants: dict[str, nn.Module] = {"dense": model}
    for s in (0.3, 0.5):
        variants[f"slimkit l1_filter {s:.0%}"] = slimkit_prune(model, x, s, True)
        variants[f"Torch-Pruning L1 {s:.0%}"] = torch_pruning_prune(model, x, s, classifier)
        if per_layer_at == s:
            variants[f"slimkit l1_filter per-layer {s:.0%}"] = slimkit_prune(model, x, s, False)
    variants["dense (2nd copy: timing noise)"] = copy.deepcopy(model)
    if args.device != "cpu":  # pruned on the CPU (counting MACs is device-independent); timed on the device
        model, x = model.to(args.device), x.to(args.device)
        variants = {k: m.to(args.device) for k, m in variants.items()}
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    lat = interleaved_latency({k: (lambda m=m: (m(x), sync())) for k, m in variants.items()}, repeats=args.repeats,
                              warmup=args.warmup, threads=args.threads)
    dense_params, dense_macs, dense_ch = count_parameters(model), count_macs(model, x), conv_channels(model)
    with torch.inference_mode():
        outputs = {k: m(x) for k, m in variants.items()}
    rows = []
    for name, m in variants.items():
        macs = count_macs(m, x)
        cos = F.cosine_similarity(outputs[name].flatten(1), outputs["dense"].flatten(1)).mean()
        rows.append([name, f"{count_parameters(m) / 1e6:.2f}", f"{macs / 1e9:.2f}", f"{dense_macs / macs:.2f}x",
                     f"{conv_channels(m)}/{dense_ch}", f"{lat[name]:.1f}", f"{lat['dense'] / lat[name]:.2f}x",
                     f"{float(cos):.3f}"])
    print(f"\n{title}, batch {x.shape[0]} x {tuple(x.shape[1:])}; dense {dense_params / 1e6:.2f}M params")
    print_table(["model", "params M", "GMACs", "MACs cut", "conv ch kept", "latency ms", "speedup", "cos vs dense"],
                rows)
    for s in (0.3, 0.5):
        ours, theirs = variants[f"slimkit l1_filter {s:.0%}"], variants[f"Torch-Pruning L1 {s:.0%}"]
        same = conv_shapes(ours) == conv_shapes(theirs)
        ratio = lat[f"Torch-Pruning L1 {s:.0%}"] / lat[f"slimkit l1_filter {s:.0%}"]
        print(f"  {s:.0%}: Torch-Pruning / slimkit latency {ratio:.2f} (>1 = slimkit faster); "
              f"identical layer shapes: {same}"
              + ("" if same else " (slimkit prunes floor(s*N) channels per group, Torch-Pruning keeps floor((1-s)*N))"))
    return {"speedup50": lat["dense"] / lat["slimkit l1_filter 50%"],
            "macs50": dense_macs / count_macs(variants["slimkit l1_filter 50%"], x),
            "tp_speedup50": lat["dense"] / lat["Torch-Pruning L1 50%"],
            "noise": abs(1 - lat["dense"] / lat["dense (2nd copy: timing noise)"])}


def digits_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.inference_mode():
        return float((model(x).argmax(1) == y).float().mean())


def digits_recovery(epochs: int) -> tuple[float, float, float]:
    """Dense accuracy, accuracy right after 50% L1-filter pruning + speedup, and after fine-tuning."""
    model, _ = zoo.load("digits_cnn")
    x_train, y_train, x_test, y_test = zoo.digits_split()
    dense = digits_accuracy(model, x_test, y_test)
    params, macs = count_parameters(model), count_macs(model, x_test[:1])
    comp = create_compressor(model, {"compressor": "l1_filter", "config_list": [
        {"sparsity": 0.5, "op_types": ["default"]}, {"exclude": True, "op_names": ["classifier.3"]}]})
    comp.compress()
    small = comp.apply_speedup(dummy_input=x_test[:1])
    pruned = digits_accuracy(small, x_test, y_test)
    torch.manual_seed(0)
    opt = torch.optim.Adam(small.parameters(), lr=1e-3)  # a new optimizer: the speedup replaced the parameters
    for _ in range(epochs):
        small.train()
        order = torch.randperm(len(x_train))
        for i in range(0, len(x_train), 64):
            idx = order[i:i + 64]
            loss = F.cross_entropy(small(x_train[idx]), y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    tuned = digits_accuracy(small, x_test, y_test)
    print(f"\nDigits CNN (sklearn digits, 450 test images): l1_filter 50% on convs + first Linear, speedup, "
          f"{epochs} epochs Adam lr 1e-3")
    print_table(["model", "params", "MACs/image", "test accuracy"], [
        ["dense", f"{params}", f"{macs}", f"{dense:.4f}"],
        ["pruned + speedup", f"{count_parameters(small)}", f"{count_macs(small, x_test[:1])}", f"{pruned:.4f}"],
        [f"pruned + speedup + {epochs} epochs", f"{count_parameters(small)}", f"{count_macs(small, x_test[:1])}",
         f"{tuned:.4f}"]])
    return dense, pruned, tuned


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="where the variants are timed: cpu (default) or cuda")
    parser.add_argument("--only", default="all", choices=["all", "cnn", "transformers"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gpu = f"; timed on {torch.cuda.get_device_name(args.device)}" if args.device.startswith("cuda") else ""
    print(f"Channel pruning + speedup vs Torch-Pruning; {machine_line(args.threads)}; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}{gpu}")

    if args.only == "transformers":
        report(run_transformers(args))
        return
    mobilenet = zoo.load("mobilenet_v2", batch_size=args.batch)
    benchmark_model("MobileNetV2 (ImageNet weights)", mobilenet.model.eval(), mobilenet.example_inputs,
                    "classifier.1", args, per_layer_at=None)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 3, 224, 224, generator=gen)
    r18 = benchmark_model("ResNet-18-shaped CNN (seeded random init)", build_resnet18(0), x, "fc", args,
                          per_layer_at=0.5)
    dense, _, tuned = digits_recovery(args.epochs)

    tol = max(0.03, r18["noise"])
    checks = [
        ("ResNet-18 50% >= 2.0x faster than dense", r18["speedup50"] >= 2.0, f"{r18['speedup50']:.2f}x"),
        ("ResNet-18 50% >= 3.5x fewer MACs", r18["macs50"] >= 3.5, f"{r18['macs50']:.2f}x"),
        (f"ResNet-18 50% speedup not worse than Torch-Pruning's (tolerance {tol:.0%} = dense-vs-copy noise, min 3%)",
         r18["speedup50"] >= (1 - tol) * r18["tp_speedup50"], f"{r18['speedup50']:.2f}x vs {r18['tp_speedup50']:.2f}x"),
        ("digits 50% + fine-tune within 1 point of dense", tuned >= dense - 0.01, f"{tuned:.4f} vs {dense:.4f}"),
    ]
    if args.only == "all":
        checks += run_transformers(args)
    report(checks)


def report(checks: list[tuple[str, bool, str]]) -> None:
    print("\nTargets")
    for what, ok, value in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {what}: {value}")


if __name__ == "__main__":
    main()
