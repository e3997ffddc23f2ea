"""SmolLM2-135M with 30% of its MLP channels pruned, then ``kd_recover`` for a fixed step budget: perplexity.

    PYTHONPATH=. .venv/bin/python benchmarks/recover_llm.py [--pruner channel_energy] [--sparsity 0.3]
        [--calib-batches 8] [--calib-batch-size 8] [--steps 12] [--batch-size 4] [--seq-len 128] [--lr 1e-4]
        [--methods full lora | none] [--lora-rank 16] [--lora-lr 1e-3] [--threads 2] [--compare-dims]

The zoo's SmolLM2-135M (fp32) is pruned by ``--pruner`` with speedup: on a Llama every filter pruner's default
layers are the MLP's gate/up projections, pruned together (dependency-aware) so ``--sparsity`` of each MLP's
intermediate channels and the matching columns of ``down_proj`` go; attention and hidden size are untouched.
The data-driven pruners (``channel_energy``, ``taylor_fo_weight``, ``activation_*``) rank the channels on
``--calib-batches`` x ``--calib-batch-size`` sequences of the PyDocText *train* split. Then, inside the same
``smash``, ``kd_recover`` distils the dense model (the model as it entered smash; KL of the token
distributions at temperature 2 plus the next-token loss) into the pruned one for ``--steps`` steps on the
PyDocText *train* split, training every weight (``full``) or rank-``--lora-rank`` LoRA adapters merged in
afterwards (``lora``). Perplexity on 8 x 256 tokens of the PyDocText *test* split (disjoint documents).

``--compare-dims`` adds, in the same table, a pruning of attention heads, hidden width and MLP channels together
(``dims``) to the same parameter count as the MLP-only one: ``--heads-ratio`` of the key/value-head groups
(with their query heads), and one ratio ``r`` for the hidden width and the MLP channels, the ``r`` whose model
has the parameter count closest to the MLP-only one (found on meta-device skeletons, nothing is pruned to find
it).
"recovered" = (pruned - after) / (pruned - dense), in perplexity and in log-perplexity. CPU seconds are the
process's user + system time (all threads) of each algorithm, as ``smash`` records it (``cpu_seconds``); the
recovery's include its two passes over the validation split (loss before / after).
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, smash, zoo  # noqa: E402
from slimkit.core import registry  # noqa: E402
from slimkit.data import pydoc_text_blocks  # noqa: E402
from slimkit.engines.pruning.maskers import num_to_prune  # noqa: E402
from slimkit.evaluation import count_parameters, perplexity  # noqa: E402

PRUNERS = ("channel_energy", "taylor_fo_weight", "activation_mean_rank", "activation_apoz_rank", "l1_filter",
           "l2_filter", "fpgm")


def config(args: argparse.Namespace, tokenizer: object, method: str | None, dims: object = ("mlp",)) -> SmashConfig:
    cfg = SmashConfig({args.pruner: {"sparsity": args.sparsity, "dims": dims}})
    names = {hp.name for hp in registry.get(args.pruner)().get_hyperparameters()}
    if "batches" in names:  # the data-driven pruners: how many train sequences rank the channels
        cfg[f"{args.pruner}_batches"] = args.calib_batches
        cfg[f"{args.pruner}_batch_size"] = args.calib_batch_size
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


def _skeleton_params(model: torch.nn.Module, hidden: float, mlp: float, heads: float) -> int:
    """Parameters of ``model``'s class with each dimension cut as the pruners count (floor(ratio * n))."""
    config = copy.deepcopy(model.config)
    cut = lambda ratio, n: n - num_to_prune(ratio, n)  # noqa: E731
    kv = cut(heads, config.num_key_value_heads)
    config.num_attention_heads = kv * (config.num_attention_heads // config.num_key_value_heads)
    config.num_key_value_heads = kv
    config.hidden_size, config.intermediate_size = cut(hidden, config.hidden_size), cut(mlp, config.intermediate_size)
    with torch.device("meta"):
        return count_parameters(type(model)(config))


def matched_ratio(model: torch.nn.Module, mlp_only: float, heads: float) -> float:
    """The hidden/MLP ratio that, with ``heads`` of the kv groups, keeps the parameters of ``mlp_only`` MLP."""
    target = _skeleton_params(model, 0.0, mlp_only, 0.0)
    low, high = 0.0, mlp_only
    for _ in range(20):  # fewer parameters as the ratio grows
        mid = (low + high) / 2
        low, high = (mid, high) if _skeleton_params(model, mid, mid, heads) > target else (low, mid)
    return min((low, high), key=lambda r: abs(_skeleton_params(model, r, r, heads) - target))


def recovered(dense: float, pruned: float, after: float) -> tuple[float, float]:
    """Share of the loss won back, in perplexity and in log-perplexity."""
    log_share = (math.log(pruned) - math.log(after)) / (math.log(pruned) - math.log(dense))
    return (pruned - after) / (pruned - dense), log_share


def run_variant(args: argparse.Namespace, dense: torch.nn.Module, tok: object, blocks: object, dense_ppl: float,
                label: str, dims: object) -> list[list[str]]:
    """Prune with ``dims`` (perplexity), then each recovery method from scratch; the table rows."""
    smashed = smash(dense, config(args, tok, None, dims), verbose=False)
    prune = smashed.applied[0]
    pruned_ppl = perplexity(smashed.model, blocks)
    sizes = prune["state"].get("config_sizes") or {}
    rows = [[f"{args.pruner} {label}", f"{count_parameters(smashed.model) / 1e6:.1f}M", f"{pruned_ppl:.2f}", "0%",
             "0%", "", f"({prune['cpu_seconds']:.0f} pruning)", f"({prune['seconds']:.0f})"]]
    print(f"{label}: {count_parameters(smashed.model)} parameters, config {sizes}; dense {dense_ppl:.2f}, pruned "
          f"{pruned_ppl:.2f} (pruning: cpu {prune['cpu_seconds']:.0f} s, wall {prune['seconds']:.0f} s)", flush=True)
    del smashed
    for method in [m for m in args.methods if m != "none"]:
        smashed = smash(dense, config(args, tok, method, dims), verbose=False)
        ppl = perplexity(smashed.model, blocks)
        record = smashed.applied[-1]
        state, cpu, wall = record["state"], record["cpu_seconds"], record["seconds"]
        in_ppl, in_log = recovered(dense_ppl, pruned_ppl, ppl)
        name = "kd_recover full" if method == "full" else f"kd_recover LoRA r{args.lora_rank}"
        rows.append([f"+ {name}, {state['train_steps']} steps", f"{count_parameters(smashed.model) / 1e6:.1f}M",
                     f"{ppl:.2f}", f"{in_ppl:.0%}", f"{in_log:.0%}", f"{state['trainable_params'] / 1e6:.2f}M",
                     f"{cpu:.0f}", f"{wall:.0f}"])
        print(f"{label} {name}: {ppl:.2f} ({in_ppl:.0%} recovered in perplexity, {in_log:.0%} in log-perplexity), "
              f"{state['train_steps']} steps, cpu {cpu:.0f} s, wall {wall:.0f} s; val loss "
              f"{state.get('val_loss_before')} -> {state.get('val_loss_after')}", flush=True)
        del smashed
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pruner", default="channel_energy", choices=PRUNERS)
    parser.add_argument("--sparsity", type=float, default=0.3)
    parser.add_argument("--calib-batches", type=int, default=8)
    parser.add_argument("--calib-batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--lora-lr", type=float, default=1e-3)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--methods", nargs="+", default=["full", "lora"], choices=["full", "lora", "none"],
                        help="recovery variants to run after the pruning; 'none' measures the pruning alone")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compare-dims", action="store_true",
                        help="also prune heads + hidden + MLP to the MLP-only parameter count (same table)")
    parser.add_argument("--heads-ratio", type=float, default=0.34, help="kv-head groups cut with --compare-dims")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    loaded = zoo.load("smollm2-135m")
    dense, tok = loaded.model.eval(), loaded.tokenizer
    blocks = pydoc_text_blocks(tok, 8, 256, split="test")
    print(machine_line(args.threads))
    print(f"{args.pruner} sparsity {args.sparsity} (MLP channels unless --compare-dims; data-driven pruners rank on "
          f"{args.calib_batches} x {args.calib_batch_size} train sequences); kd_recover {args.steps} steps x batch "
          f"{args.batch_size} x {args.seq_len} tokens, lr {args.lr} (full) / {args.lora_lr} (LoRA rank "
          f"{args.lora_rank}); perplexity on "
          "8 x 256 test tokens\n", flush=True)
    dense_ppl = perplexity(dense, blocks)
    rows = [["dense", f"{count_parameters(dense) / 1e6:.1f}M", f"{dense_ppl:.2f}", "", "", "", "", ""]]
    variants = [(f"{args.sparsity:.0%} MLP", ["mlp"])]
    if args.compare_dims:
        r = matched_ratio(dense, args.sparsity, args.heads_ratio)
        variants.append((f"heads {args.heads_ratio:.0%} + hidden & MLP {r:.1%}",
                         {"mlp": r, "heads": args.heads_ratio, "hidden": r}))
    done = {}
    for label, dims in reversed(variants):  # the new (head + hidden + MLP) variant first: a cut-short run still has it
        done[label] = run_variant(args, dense, tok, blocks, dense_ppl, label, dims)
    for label, _ in variants:
        rows += done[label]
    print()
    print_table(["model", "params", "test ppl", "recovered (ppl)", "recovered (log-ppl)", "trained params",
                 "recovery CPU s", "wall s"], rows)


if __name__ == "__main__":
    main()
