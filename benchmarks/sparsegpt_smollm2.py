"""SparseGPT vs Wanda vs magnitude pruning of SmolLM2-135M at 50 % unstructured and 2:4, plus sparse + 4-bit.

    .venv/bin/python benchmarks/sparsegpt_smollm2.py [--threads 2] [--samples 32] [--seq-len 256]
        [--patterns 0:0 2:4] [--methods magnitude wanda sparsegpt] [--no-4bit]

Every Linear layer inside the 30 decoder blocks is pruned (the tied embedding / lm_head stays dense, as the
pruners' default ``exclude`` says). ``magnitude``: the smallest |w| of each layer (50 %) or of each group of 4
inputs of a row (2:4), no data. ``wanda`` and ``sparsegpt``: slimkit's pruners through ``smash`` with
``cfg.add_data("PyDocText")`` (``--samples`` x ``--seq-len`` tokens of the PyDocText train split). "sparse + 4-bit":
sparsegpt with ``bits=4`` (group 64, asymmetric; SmolLM2's 576-wide rows take no group of 128), stored packed.
Perplexity: PyDocText test split, 8 x 256 tokens (documents disjoint from the calibration ones).
SmolLM2's weights are the Q4_1 GGUF dequantized (see /work/shared/ENVIRONMENT.md), so a few are already 0.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, SmashedModel, smash, zoo  # noqa: E402
from slimkit.data import pydoc_text_blocks  # noqa: E402
from slimkit.engines.pruning.sparsegpt import lowest_mask, nm_mask  # noqa: E402
from slimkit.engines.quantization.lowbit import PackedLinear  # noqa: E402
from slimkit.engines.quantization.lowbit.calibration import find_blocks  # noqa: E402
from slimkit.evaluation import perplexity  # noqa: E402

METHODS = ("magnitude", "wanda", "sparsegpt")


def block_linears(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    prefix, _ = find_blocks(model)  # a dense model here (packed layers are no Linear: see zero_share)
    return {n: m for n, m in model.named_modules() if n.startswith(prefix + ".") and isinstance(m, torch.nn.Linear)}


def magnitude(model: torch.nn.Module, structure: str) -> torch.nn.Module:
    """Per-layer magnitude pruning (50 %) or per-row groups of M (N:M), in place."""
    n, m = (int(p) for p in structure.split(":"))
    with torch.no_grad():
        for layer in block_linears(model).values():
            score = layer.weight.abs()
            layer.weight.masked_fill_(nm_mask(score, n, m) if m else lowest_mask(score, 0.5), 0.0)
    return model


def pruned(base, tok, method: str, structure: str, args, bits: int = 0) -> torch.nn.Module:
    cfg = SmashConfig(device="cpu")
    cfg.add_tokenizer(tok)
    cfg.add_data("PyDocText")
    cfg["pruner"] = method
    cfg[f"{method}_mask_structure"] = structure
    cfg[f"{method}_n_calibration_samples"] = args.samples
    cfg[f"{method}_seq_len"] = args.seq_len
    if bits:
        cfg[f"{method}_bits"] = bits
        cfg[f"{method}_group_size"] = 64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return smash(base, cfg, verbose=False)


def zero_share(model: torch.nn.Module, prefix: str) -> float:
    """Share of exact zeros over the weights of the layers inside the blocks at ``prefix`` (packed ones dequantized)."""
    model = model.model if isinstance(model, SmashedModel) else model
    zeros = total = 0
    for name, module in model.named_modules():
        if not name.startswith(prefix + "."):
            continue
        if isinstance(module, PackedLinear):
            w = module.dequantize()
        elif isinstance(module, torch.nn.Linear):
            w = module.weight
        else:
            continue
        zeros += int((w == 0).sum())
        total += w.numel()
    return zeros / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--patterns", nargs="+", default=["0:0", "2:4"], choices=["0:0", "2:4", "4:8"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--no-4bit", action="store_true", help="skip the sparse + 4-bit row")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    loaded = zoo.load("smollm2-135m")
    base, tok = loaded.model.eval(), loaded.tokenizer
    test_ids = pydoc_text_blocks(tok, 8, 256, split="test")
    fp32 = perplexity(base, test_ids)
    prefix, _ = find_blocks(base)  # found on the dense model: a packed model's blocks hold no nn.Linear
    rows = [["fp32 (dense)", "-", f"{100 * zero_share(base, prefix):.1f}%", f"{fp32:.2f}", "+0.0%", "-"]]
    print(f"fp32 perplexity {fp32:.2f}", flush=True)
    jobs = [(method, s, 0) for s in args.patterns for method in args.methods]
    if not args.no_4bit and "sparsegpt" in args.methods:
        jobs.append(("sparsegpt", args.patterns[-1], 4))
    for method, structure, bits in jobs:
        start = time.perf_counter()
        if method == "magnitude":
            model = magnitude(zoo.load("smollm2-135m").model.eval(), structure)
        else:
            model = pruned(base, tok, method, structure, args, bits)
        seconds = time.perf_counter() - start
        ppl = perplexity(model, test_ids)
        print(f"{method} {structure} bits={bits}: perplexity {ppl:.2f} in {seconds:.1f} s", flush=True)
        pattern = "50 % unstructured" if structure == "0:0" else structure
        name = f"{method}" + (" + 4-bit g64" if bits else "")
        rows.append([name, pattern, f"{100 * zero_share(model, prefix):.1f}%", f"{ppl:.2f}",
                     f"{100 * (ppl / fp32 - 1):+.1f}%", f"{seconds:.1f}"])
        del model

    print(f"\nSmolLM2-135M pruning of the Linear layers inside the blocks; {machine_line(args.threads)}")
    print(f"perplexity: PyDocText test, 8 x 256 tokens; calibration (wanda, sparsegpt): {args.samples} x "
          f"{args.seq_len} tokens of the PyDocText train split")
    print_table(["method", "pattern", "zeros in block Linears", "perplexity", "vs fp32", "prune s"], rows)


if __name__ == "__main__":
    main()
