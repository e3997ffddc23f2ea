"""Packed 4-bit MoE experts vs fp32 on a Mixtral-shaped model with random weights: file size and decode speed.

    .venv/bin/python benchmarks/quant_moe.py [--layers 8] [--hidden 1024] [--intermediate 2816] [--experts 8]
        [--top-k 2] [--threads 2 1] [--decode-tokens 32] [--decode-repeats 3] [--group-size 128] [--no-int8]

A transformers ``MixtralForCausalLM`` (random weights, 32000-token vocabulary) is smashed with ``rtn`` (4-bit,
the experts packed per expert and run by the C kernel on each expert's slice of the packed buffers; lm_head kept in
fp32 by default) and ``int8_dynamic`` (int8 per-expert weights, fbgemm). For each: size on disk of the saved model,
bytes of the quantized experts vs their fp32 weights, share of the Linear-like weights quantized (the coverage
record), greedy decode speed with the KV cache (tokens/s, all models timed round-robin so machine noise hits all
alike; once per ``--threads`` value), logits cosine to fp32 on the prompt, and the greedy tokens that agree with
fp32 (random weights: a sanity check, not a quality figure). Ends with a save/load round trip of the 4-bit model.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_samples, machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, SmashedModel, smash  # noqa: E402
from slimkit.engines.quantization.int8.experts import Int8Experts  # noqa: E402
from slimkit.engines.quantization.lowbit import native  # noqa: E402
from slimkit.engines.quantization.lowbit.experts import PackedExperts  # noqa: E402
from slimkit.evaluation import size_on_disk  # noqa: E402


def build(args: argparse.Namespace) -> torch.nn.Module:
    cfg = transformers.MixtralConfig(
        vocab_size=32000, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.hidden // 128,
        num_key_value_heads=max(1, args.hidden // 512),
        num_local_experts=args.experts, num_experts_per_tok=args.top_k, max_position_embeddings=4096,
        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    return transformers.MixtralForCausalLM(cfg).eval()


def quantize(base: torch.nn.Module, method: str, group_size: int) -> tuple[SmashedModel, float]:
    cfg = SmashConfig(device="cpu")
    cfg["quantizer"] = method
    if method == "rtn":
        cfg["rtn_bits"] = 4
        cfg["rtn_group_size"] = group_size
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        smashed = smash(base, cfg, verbose=False)
    return smashed, time.perf_counter() - start


def experts_ratio(model: torch.nn.Module) -> float:
    """Bytes the quantized experts keep (codes, scales, zeros; int8 weights + scales) / their fp32 bytes."""
    stored = fp32 = 0
    for m in model.modules():
        if isinstance(m, PackedExperts):
            stored += sum(b.numel() * b.element_size() for b in m.buffers())
        elif isinstance(m, Int8Experts):
            stored += sum(t.numel() * t.element_size() for t in m.state_dict().values())
        else:
            continue
        fp32 += 4 * m.num_experts * m.layout.macs_per_pair()
    return stored / fp32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--intermediate", type=int, default=2816)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--decode-repeats", type=int, default=3)
    parser.add_argument("--no-int8", action="store_true", help="leave out the int8_dynamic row")
    args = parser.parse_args()
    torch.set_num_threads(args.threads[0])

    base = build(args)
    prompt = torch.randint(3, 32000, (1, 16), generator=torch.Generator().manual_seed(1))
    models: dict[str, torch.nn.Module] = {"fp32": base}
    seconds: dict[str, float] = {}
    for key, method in [("rtn 4-bit", "rtn"), *([] if args.no_int8 else [("int8_dynamic", "int8_dynamic")])]:
        models[key], seconds[key] = quantize(base, method, args.group_size)
        print(f"{key}: quantized in {seconds[key]:.1f} s", flush=True)

    def decode(model: torch.nn.Module) -> torch.Tensor:
        return model.generate(prompt, max_new_tokens=args.decode_tokens, min_new_tokens=args.decode_tokens,
                              do_sample=False, pad_token_id=0)

    with torch.inference_mode():
        logits = {k: m(prompt).logits.flatten() for k, m in models.items()}
        tokens = {k: decode(m)[0, prompt.shape[1]:] for k, m in models.items()}
    ms, best = {}, {}
    load_before = os.getloadavg()
    for threads in args.threads:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            samples = interleaved_samples({k: lambda m=m: decode(m) for k, m in models.items()},
                                          repeats=args.decode_repeats, warmup=1, threads=threads)
        ms[threads] = {k: statistics.median(v) for k, v in samples.items()}
        best[threads] = {k: min(v) for k, v in samples.items()}
        print(f"timed on {threads} thread(s)", flush=True)
    load_after = os.getloadavg()
    sizes = {k: size_on_disk(m) for k, m in models.items()}
    rows = []
    for key, model in models.items():
        cov = model.applied[0]["state"]["coverage"] if key != "fp32" else None
        cos = torch.nn.functional.cosine_similarity(logits[key], logits["fp32"], dim=0)
        speed = [cell for t in args.threads for cell in (
            f"{args.decode_tokens / (ms[t][key] / 1000):.2f}", f"{ms[t]['fp32'] / ms[t][key]:.2f}x",
            f"{args.decode_tokens / (best[t][key] / 1000):.2f}")]
        rows.append([key, "-" if key == "fp32" else f"{seconds[key]:.1f}", f"{sizes[key] / 1e6:.0f}",
                     f"{sizes[key] / sizes['fp32']:.3f}x", "-" if key == "fp32" else f"{experts_ratio(model):.3f}x",
                     "-" if cov is None else f"{100 * cov['share']:.1f}%", *speed, f"{float(cos):.4f}",
                     f"{int((tokens[key] == tokens['fp32']).sum())}/{args.decode_tokens}"])

    experts_params = args.layers * args.experts * 3 * args.hidden * args.intermediate
    print(f"\nMixtral-shaped MoE, random weights: {args.layers} layers, hidden {args.hidden}, {args.experts} experts "
          f"top-{args.top_k}, intermediate {args.intermediate}, vocab 32000 ({experts_params / 1e6:.0f}M expert "
          f"weights); rtn group size {args.group_size}, lm_head fp32 (rtn's default exclude); low-bit kernel: "
          f"{native.isa_name()}; {machine_line(args.threads[0])} (timed on {args.threads} threads)")
    print(f"decode: greedy, {args.decode_tokens} new tokens after a 16-token prompt, KV cache, median of "
          f"{args.decode_repeats} round-robin runs (best: the fastest run of each); machine load average (1/5/15 min) "
          f"{'/'.join(f'{v:.1f}' for v in load_before)} before and {'/'.join(f'{v:.1f}' for v in load_after)} after "
          f"the timing on {os.cpu_count()} CPUs")
    speed_heads = [h for t in args.threads for h in (f"tok/s @{t}t", f"vs fp32 @{t}t", f"best tok/s @{t}t")]
    print_table(["model", "quantize s", "file MB", "file vs fp32", "experts bytes vs fp32", "Linear-like quantized",
                 *speed_heads, "logits cosine", "greedy tokens = fp32"], rows)

    with tempfile.TemporaryDirectory() as tmp:
        models["rtn 4-bit"].save_pretrained(Path(tmp) / "m")
        again = SmashedModel.from_pretrained(Path(tmp) / "m")
        with torch.inference_mode():
            exact = torch.equal(again(prompt).logits, models["rtn 4-bit"](prompt).logits)
        dense = [n for n, p in again.named_parameters() if p.dim() == 3]
    print(f"save/load of 'rtn 4-bit' reproduces its logits exactly: {exact}; 3-D expert weights left in the reloaded "
          f"model: {len(dense)}")


if __name__ == "__main__":
    main()
