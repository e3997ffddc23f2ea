"""Low-bit weight-only quantization of SmolLM2-135M: rtn, hqq, gptq, awq at 4 and 3 bits vs fp32, in one run.

    .venv/bin/python benchmarks/quant_llm.py [--threads 2] [--group-size 128] [--bits 4 3] [--decode-tokens 32]
        [--methods rtn gptq] [--isa avx512 avx2] [--lm-head]

Perplexity on PyDocText test text (8 x 256 tokens); gptq/awq calibrate on the PyDocText train split through
``cfg.add_data("PyDocText")`` (whole documents, disjoint from the test documents). For each method: time to
quantize (smash), size on disk of the saved model, bytes of the packed Linear layers vs their fp32 weights,
and greedy decode speed with the KV cache (tokens/s, all models timed round-robin so machine noise hits all
alike). ``--isa`` times every low-bit model once per listed instruction set of the C kernel (``auto``, ``avx512``,
``avx2``; ``avx2`` is the AVX2 + FMA build, also on an AVX-512 CPU) in the same round-robin, and the table names the
set each row really ran. ``--lm-head`` adds rows where the (tied) lm_head is quantized too. Ends with a save/load
round trip of a 4-bit model and the targets, each marked MET or NOT MET.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_samples, machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, SmashedModel, smash, zoo  # noqa: E402
from slimkit.data import pydoc_split_topics, pydoc_text_blocks  # noqa: E402
from slimkit.engines.quantization.lowbit import PackedLinear, native  # noqa: E402
from slimkit.evaluation import perplexity, size_on_disk  # noqa: E402

METHODS = ("rtn", "hqq", "gptq", "awq")


def packed_linear_ratio(model: torch.nn.Module) -> float:
    """Bytes of every PackedLinear's buffers (codes, scales, zeros) / bytes of the same weights in fp32."""
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    stored = sum(b.numel() * b.element_size() for m in packed for b in m.buffers())
    return stored / sum(4 * m.in_features * m.out_features for m in packed)


def quantize(base: torch.nn.Module, tok, method: str, bits: int, group_size: int,
             lm_head: bool = False) -> tuple[SmashedModel, float]:
    cfg = SmashConfig(device="cpu")
    cfg.add_tokenizer(tok)
    cfg.add_data("PyDocText")
    cfg["quantizer"] = method
    cfg[f"{method}_bits"] = bits
    cfg[f"{method}_group_size"] = group_size
    if lm_head:
        cfg[f"{method}_exclude"] = []
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        smashed = smash(base, cfg, verbose=False)
    return smashed, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--bits", type=int, nargs="+", default=[4, 3])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--decode-repeats", type=int, default=3)
    parser.add_argument("--isa", nargs="+", default=["auto"], choices=sorted(native.ISA_FLAGS),
                        help="kernel instruction set(s) to time each low-bit model with")
    parser.add_argument("--lm-head", action="store_true", help="also quantize the tied lm_head (extra rows)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    loaded = zoo.load("smollm2-135m")
    base, tok = loaded.model.eval(), loaded.tokenizer
    test_ids = pydoc_text_blocks(tok, 8, 256, split="test")
    splits = pydoc_split_topics()
    disjoint = not set(splits["train"]) & set(splits["test"])
    prompt = test_ids[:1, :16]

    rows, models, ppl, seconds = [], {"fp32": base}, {}, {}
    isas = {isa: native.isa_name(isa) for isa in args.isa}  # requested -> really used ("torch": no kernel)
    ppl["fp32"] = perplexity(base, test_ids)
    print(f"fp32 perplexity {ppl['fp32']:.2f}; kernel instruction sets: {isas}", flush=True)
    for bits in args.bits:
        for method in args.methods:
            for head in (False, True) if args.lm_head else (False,):
                key = f"{method} {bits}-bit" + (" +lm_head" if head else "")
                smashed, secs = quantize(base, tok, method, bits, args.group_size, head)
                models[key], seconds[key] = smashed, secs
                for isa, used in isas.items():
                    with native.use_isa(isa):
                        ppl[f"{key} [{used}]"] = perplexity(smashed, test_ids)
                    print(f"{key} [{used}]: quantized in {secs:.1f} s, perplexity {ppl[f'{key} [{used}]']:.2f}",
                          flush=True)

    def decode(model, isa=None):
        with native.use_isa(isa):
            return model.generate(prompt, max_new_tokens=args.decode_tokens, min_new_tokens=args.decode_tokens,
                                  do_sample=False, pad_token_id=tok.eos_token_id)

    timed = {"fp32": lambda: decode(base)}
    for key in seconds:
        for isa, used in isas.items():
            timed[f"{key} [{used}]"] = lambda m=models[key], i=isa: decode(m, i)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = interleaved_samples(timed, repeats=args.decode_repeats, warmup=1, threads=args.threads)
    ms = {k: statistics.median(v) for k, v in samples.items()}
    best = {k: min(v) for k, v in samples.items()}
    sizes = {key: size_on_disk(model) for key, model in models.items()}
    fp32_size = sizes["fp32"]
    for row in ms:
        key = row.split(" [")[0]
        model, size = models[key], sizes[key]
        ratio = "-" if key == "fp32" else f"{packed_linear_ratio(model):.3f}x"
        tps = args.decode_tokens / (ms[row] / 1000)
        rows.append([row, f"{ppl[row]:.2f}", f"{100 * (ppl[row] / ppl['fp32'] - 1):+.1f}%",
                     "-" if key == "fp32" else f"{seconds[key]:.1f}", f"{size / 1e6:.1f}", f"{size / fp32_size:.2f}x",
                     ratio, f"{tps:.1f}", f"{ms['fp32'] / ms[row]:.2f}x",
                     f"{args.decode_tokens / (best[row] / 1000):.1f}", f"{best['fp32'] / best[row]:.2f}x"])

    print(f"\nSmolLM2-135M low-bit weight-only, group size {args.group_size}; {machine_line(args.threads)}")
    print(f"perplexity: PyDocText test, 8 x 256 tokens; calibration: PyDocText train split, documents disjoint "
          f"from the test documents: {disjoint}")
    print(f"decode: greedy, {args.decode_tokens} new tokens after a 16-token prompt, median of "
          f"{args.decode_repeats} round-robin runs (best: the fastest run of each); [isa] = instruction set of the "
          "low-bit kernel used")
    print_table(["model [kernel isa]", "perplexity", "vs fp32", "quantize s", "file MB", "file vs fp32",
                 "packed Linear vs fp32 Linear", "decode tok/s", "decode vs fp32", "best tok/s",
                 "best vs fp32"], rows)

    check_key = f"gptq {min(args.bits)}-bit" if "gptq" in args.methods else next(iter(seconds))
    with tempfile.TemporaryDirectory() as tmp:
        models[check_key].save_pretrained(Path(tmp) / "m")
        again = SmashedModel.from_pretrained(Path(tmp) / "m")
        with torch.inference_mode():
            exact = torch.equal(again(test_ids[:1]).logits, models[check_key](test_ids[:1]).logits)
        dense = [n for n, p in again.named_parameters() if p.dim() == 2 and ".layers." in n]
    print(f"save/load of '{check_key}' reproduces its logits exactly: {exact}; dense 2-D weights inside the "
          f"reloaded blocks: {len(dense)}")

    four = [k for k in seconds if k.endswith("4-bit")]
    if four:
        first = next(iter(isas.values()))
        top = min(four, key=lambda k: ppl[f"{k} [{first}]"])
        worst_ratio = max(packed_linear_ratio(models[k]) for k in four)
        change = 100 * (ppl[f"{top} [{first}]"] / ppl["fp32"] - 1)
        print(f"target: a 4-bit method within +10% of fp32 perplexity: best {top} {change:+.1f}% -> "
              f"{'MET' if change <= 10 else 'NOT MET'}")
        print(f"target: 4-bit packed Linear <= 0.30x fp32 Linear weights: {worst_ratio:.3f}x -> "
              f"{'MET' if worst_ratio <= 0.30 else 'NOT MET'}")
    gptq = [k for k in seconds if k.startswith("gptq")]
    if gptq:
        slowest = max(seconds[k] for k in gptq)
        print(f"target: gptq finishes in <= 600 s on {args.threads} threads: {slowest:.0f} s -> "
              f"{'MET' if slowest <= 600 else 'NOT MET'}")
    for row in ms:
        if row.split(" [")[0] in ("rtn 4-bit", "gptq 4-bit"):
            speed = ms["fp32"] / ms[row]
            print(f"target: {row} decode >= 1.3x fp32 tokens/s (medians): {speed:.2f}x -> "
                  f"{'MET' if speed >= 1.3 else 'NOT MET'} (best runs: {best['fp32'] / best[row]:.2f}x)")
    slow = max(ms[k] / ms["fp32"] for k in ms)
    print(f"target: decode never slower than 3x fp32: slowest is {slow:.2f}x fp32 time per token -> "
          f"{'MET' if slow <= 3 else 'NOT MET'}")


if __name__ == "__main__":
    main()
