"""SmolLM2-135M with 30% of its MLP channels pruned, then ``kd_recover`` for a fixed step budget: perplexity.

    PYTHONPATH=. .venv/bin/python benchmarks/recover_llm.py [--sparsity 0.3] [--steps 40] [--batch-size 4]
        [--seq-len 128] [--lr 1e-4] [--methods full lora] [--lora-rank 16] [--threads 2]

The zoo's SmolLM2-135M (fp32) is pruned by ``l1_filter`` with speedup: its default layers on a Llama are the
MLP's gate/up projections, pruned together (dependency-aware) so 30% of each MLP's intermediate channels and
the matching columns of ``down_proj`` go. Then, inside the same ``smash``, ``kd_recover`` distils the dense
model (the model as it entered smash; KL of the token distributions at temperature 2 plus the next-token loss)
into the pruned one for ``--steps`` steps on the PyDocText *train* split, training every weight (``full``) or
rank-``--lora-rank`` LoRA adapters merged in afterwards (``lora``). Perplexity is measured on 8 x 256 tokens of
the PyDocText *test* split (disjoint documents). "recovered" = (pruned - after) / (pruned - dense). The CPU
time is the process's user+system time of the recovery alone (the smash time minus the pruning-only smash).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, smash, zoo  # noqa: E402
from slimkit.data import pydoc_text_blocks  # noqa: E402
from slimkit.evaluation import count_parameters, perplexity  # noqa: E402


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def config(args: argparse.Namespace, tokenizer: object, method: str | None) -> SmashConfig:
    cfg = SmashConfig({"l1_filter": {"sparsity": args.sparsity}})
    if method is not None:
        cfg["recoverer"] = "kd_recover"
        for key, value in (("steps", args.steps), ("epochs", 1000), ("lr", args.lr), ("batch_size", args.batch_size),
                           ("temperature", 2.0), ("num_threads", args.threads),
                           ("lora_rank", args.lora_rank if method == "lora" else 0)):
            cfg[f"kd_recover_{key}"] = value
        if method == "lora":
            cfg["kd_recover_lr"] = args.lora_lr
    cfg.add_tokenizer(tokenizer)
    cfg.add_data("PyDocText", max_seq_len=args.seq_len, chunk_chars=4 * args.seq_len)
    return cfg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sparsity", type=float, default=0.3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--lora-lr", type=float, default=1e-3)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--methods", nargs="+", default=["full", "lora"], choices=["full", "lora"])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    loaded = zoo.load("smollm2-135m")
    dense, tok = loaded.model.eval(), loaded.tokenizer
    blocks = pydoc_text_blocks(tok, 8, 256, split="test")
    print(machine_line(args.threads))
    print(f"l1_filter sparsity {args.sparsity} (MLP channels); kd_recover {args.steps} steps x batch "
          f"{args.batch_size} x {args.seq_len} tokens, lr {args.lr} (full) / {args.lora_lr} (LoRA rank "
          f"{args.lora_rank}); perplexity on 8 x 256 test tokens\n", flush=True)
    dense_ppl = perplexity(dense, blocks)
    rows = [["dense", f"{count_parameters(dense) / 1e6:.1f}M", f"{dense_ppl:.2f}", "", "", "", ""]]
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    pruned = smash(dense, config(args, tok, None), verbose=False).model
    prune_cpu, prune_wall = cpu_seconds() - cpu0, time.perf_counter() - wall0
    pruned_ppl = perplexity(pruned, blocks)
    rows.append([f"l1_filter {args.sparsity:.0%} MLP", f"{count_parameters(pruned) / 1e6:.1f}M", f"{pruned_ppl:.2f}",
                 "0%", "", "", ""])
    print(f"dense {dense_ppl:.2f}, pruned {pruned_ppl:.2f} (pruning {prune_wall:.0f} s)", flush=True)
    for method in args.methods:
        cpu0, wall0 = cpu_seconds(), time.perf_counter()
        smashed = smash(dense, config(args, tok, method), verbose=False)
        cpu, wall = cpu_seconds() - cpu0 - prune_cpu, time.perf_counter() - wall0 - prune_wall
        ppl = perplexity(smashed.model, blocks)
        state = smashed.applied[-1]["state"]
        recovered = (pruned_ppl - ppl) / (pruned_ppl - dense_ppl)
        name = "kd_recover full" if method == "full" else f"kd_recover LoRA r{args.lora_rank}"
        rows.append([f"+ {name}", f"{count_parameters(smashed.model) / 1e6:.1f}M", f"{ppl:.2f}", f"{recovered:.0%}",
                     f"{state['trainable_params'] / 1e6:.2f}M", f"{cpu:.0f}", f"{wall:.0f}"])
        print(f"{name}: {ppl:.2f} ({recovered:.0%} recovered), {state['train_steps']} steps, cpu {cpu:.0f} s, "
              f"wall {wall:.0f} s; val loss {state.get('val_loss_before')} -> {state.get('val_loss_after')}",
              flush=True)
    print()
    print_table(["model", "params", "test ppl", "recovered", "trained params", "recovery CPU s", "wall s"], rows)


if __name__ == "__main__":
    main()
