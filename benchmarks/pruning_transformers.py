"""Transformers in benchmarks/pruning.py: ViT-B/16- and BERT-base-shaped models, slimkit vs Torch-Pruning at 50%.

Both models are transformers' own classes with the published base sizes (hidden 768, 12 layers, 12 heads, MLP
3072; ViT: 224x224 images, patches of 16; BERT: vocab 30522, 128 tokens), seeded random weights (no hub access
here). Pruned at a nominal 50% with L1 magnitudes, the classifier left alone:

* slimkit: ``smash`` with ``l1_filter`` (``sparsity=0.5``, default ``dims``: MLP channels, whole attention heads
  and the hidden width of the residual stream);
* Torch-Pruning ``MetaPruner`` + ``MagnitudeImportance(p=1)`` at ``pruning_ratio=0.5``.

Parameters, MACs, latency (median of interleaved runs, the same process and threads) and output cosine vs the
dense model. The two pruned models have the same parameter count and matrix shapes when both cut every dimension in
half. What runs differs inside attention: slimkit removes 6 whole heads of 64 and writes hidden_size=384,
num_attention_heads=6 into the config; Torch-Pruning removes 384 q/k/v channels chosen one by one and leaves
``head_dim`` at 64 and the config at 768 / 12, so transformers' ``view(..., -1, head_dim)`` regroups the kept
channels into 6 "heads" of 64 that mix channels of different original heads (same compute, but not the dense
model's heads, and a config that no longer matches the weights).
"""

from __future__ import annotations

import argparse
import copy
import warnings

import torch
import torch.nn.functional as F
import transformers as T
from common import interleaved_latency, print_table
from torch import nn

from slimkit import SmashConfig, smash
from slimkit.evaluation import count_macs, count_parameters

BASE = dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072, num_hidden_layers=12)


def vit_b16() -> tuple[nn.Module, dict[str, torch.Tensor], str]:
    torch.manual_seed(0)
    model = T.ViTForImageClassification(T.ViTConfig(image_size=224, patch_size=16, num_labels=1000, **BASE)).eval()
    return model, {"pixel_values": torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))}, \
        "classifier"


def bert_base() -> tuple[nn.Module, dict[str, torch.Tensor], str]:
    torch.manual_seed(0)
    model = T.BertForSequenceClassification(T.BertConfig(vocab_size=30522, num_labels=2, **BASE)).eval()
    ids = torch.randint(0, 30522, (1, 128), generator=torch.Generator().manual_seed(1))
    return model, {"input_ids": ids}, "classifier"


def batched(inputs: dict[str, torch.Tensor], batch: int) -> dict[str, torch.Tensor]:
    return {k: v.expand(batch, *v.shape[1:]).contiguous() for k, v in inputs.items()}


def slimkit_prune(model: nn.Module, x: dict[str, torch.Tensor], sparsity: float) -> nn.Module:
    cfg = SmashConfig({"l1_filter": {"sparsity": sparsity}}, device="cpu")
    cfg.add_example_inputs(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return smash(copy.deepcopy(model), cfg, verbose=False).model.eval()


def torch_pruning_prune(model: nn.Module, x: dict[str, torch.Tensor], sparsity: float, classifier: str) -> nn.Module:
    import torch_pruning as tp

    pruned = copy.deepcopy(model)
    pruner = tp.pruner.MetaPruner(pruned, x, importance=tp.importance.MagnitudeImportance(p=1),
                                  pruning_ratio=sparsity, ignored_layers=[pruned.get_submodule(classifier)])
    pruner.step()
    return pruned.eval()


def benchmark(title: str, build, args: argparse.Namespace) -> dict[str, float]:
    model, x1, classifier = build()
    x = batched(x1, args.batch)
    variants = {"dense": model, "slimkit l1_filter 50%": slimkit_prune(model, x1, 0.5),
                "Torch-Pruning L1 50%": torch_pruning_prune(model, x1, 0.5, classifier),
                "dense (2nd copy: timing noise)": copy.deepcopy(model)}
    lat = interleaved_latency({k: (lambda m=m: m(**x)) for k, m in variants.items()}, repeats=args.repeats,
                              warmup=args.warmup, threads=args.threads)
    with torch.inference_mode():
        outputs = {k: m(**x).logits for k, m in variants.items()}
    dense_params, dense_macs = count_parameters(model), count_macs(model, x)
    rows, numbers = [], {}
    for name, m in variants.items():
        params, macs = count_parameters(m), count_macs(m, x)
        cos = F.cosine_similarity(outputs[name].flatten(1), outputs["dense"].flatten(1)).mean()
        rows.append([name, f"{params / 1e6:.2f}", f"{params / dense_params:.1%}", f"{macs / 1e9:.1f}",
                     f"{dense_macs / macs:.2f}x", f"{lat[name]:.0f}", f"{lat['dense'] / lat[name]:.2f}x",
                     f"{float(cos):.3f}"])
        numbers[name] = params
    print(f"\n{title}, batch {args.batch} x {tuple(next(iter(x.values())).shape[1:])}; seeded random weights")
    print_table(["model", "params M", "kept", "GMACs", "MACs cut", "latency ms", "speedup", "cos vs dense"], rows)
    ours, theirs = "slimkit l1_filter 50%", "Torch-Pruning L1 50%"
    print(f"  parameters slimkit / Torch-Pruning: {numbers[ours] / numbers[theirs]:.4f}; latency Torch-Pruning / "
          f"slimkit: {lat[theirs] / lat[ours]:.2f} (>1 = slimkit faster)")
    return {"ours_params": numbers[ours], "tp_params": numbers[theirs], "ours_ms": lat[ours], "tp_ms": lat[theirs],
            "noise": abs(1 - lat["dense"] / lat["dense (2nd copy: timing noise)"])}


def run(args: argparse.Namespace) -> list[tuple[str, bool, str]]:
    """Benchmark both models; returns the target checks (what, ok, value)."""
    checks = []
    for title, build in (("ViT-B/16-shaped (transformers ViTForImageClassification)", vit_b16),
                         ("BERT-base-shaped (transformers BertForSequenceClassification)", bert_base)):
        r = benchmark(title, build, args)
        tol = max(0.03, r["noise"])
        short = title.split(" ")[0]
        checks.append((f"{short}: slimkit parameters within 1% of Torch-Pruning's",
                       abs(r["ours_params"] / r["tp_params"] - 1) <= 0.01,
                       f"{r['ours_params'] / 1e6:.2f}M vs {r['tp_params'] / 1e6:.2f}M"))
        checks.append((f"{short}: slimkit at least as fast as Torch-Pruning (tolerance {tol:.0%} = dense-vs-copy "
                       "noise, min 3%)", r["ours_ms"] <= (1 + tol) * r["tp_ms"],
                       f"{r['ours_ms']:.0f} ms vs {r['tp_ms']:.0f} ms"))
    return checks
