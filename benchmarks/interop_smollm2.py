"""SmolLM2-135M gptq 4-bit -> compressed-tensors -> transformers: same perplexity; decode speed of both runtimes.

    .venv/bin/python benchmarks/interop_smollm2.py [--group-size 64] [--threads 2] [--decode-tokens 32]
        [--decode-repeats 3] [--folder DIR]

1. slimkit's ``gptq`` (4-bit, group ``--group-size``, asymmetric, act order, calibration on the PyDocText train
   split) quantizes SmolLM2-135M; the result is saved with ``save_pretrained(DIR, format="compressed-tensors")``.
   The default group is 64, not 128: SmolLM2's attention and gate/up rows have 576 columns, which 128 does not
   divide, and compressed-tensors' group quantization needs whole groups (its forward raises on a partial last
   group), so slimkit refuses to write g128 for this model. Any group that does not divide every row is refused
   here before the (minutes-long) GPTQ runs.
2. transformers opens DIR (``AutoModelForCausalLM.from_pretrained`` with compressed-tensors'
   ``dequantize=True``, the path that reads asymmetric pack-quantized zero points) and slimkit imports the same DIR
   onto its packed layers (``SmashedModel.from_pretrained``).
3. Perplexity on the PyDocText test split (8 x 256 tokens) of slimkit's own quantized model, of transformers
   running DIR and of slimkit running DIR, computed by one plain loop (mean token NLL, exp) for all three.
4. Greedy decode with the KV cache after a 16-token prompt, tokens/s of slimkit running DIR (its packed CPU kernel)
   and of transformers running DIR (dense fp32 weights after dequantizing), timed round-robin in this one process.
Targets (MET / NOT MET): transformers' perplexity within 0.1 % of slimkit's own.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import transformers  # noqa: E402
from common import interleaved_samples, machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, SmashedModel, smash, zoo  # noqa: E402
from slimkit.data import pydoc_text_blocks  # noqa: E402
from slimkit.engines.quantization.lowbit import PackedLinear  # noqa: E402


def plain_perplexity(model, ids: torch.Tensor) -> float:
    """exp(mean next-token NLL) over every block of ``ids`` [n, seq], one block per forward."""
    total, count = 0.0, 0
    with torch.inference_mode():
        for row in ids:
            logits = model(row[None]).logits.float()[0, :-1]
            nll = torch.nn.functional.cross_entropy(logits, row[1:], reduction="sum")
            total, count = total + float(nll), count + row.numel() - 1
    return math.exp(total / count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--group-size", type=int, default=64,
                        help="GPTQ group size; must divide every Linear's input width (576 and 1536 on SmolLM2)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--decode-repeats", type=int, default=3)
    parser.add_argument("--folder", default="smashed/smollm2_gptq4_ct",
                        help="where the compressed-tensors checkpoint is written")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")

    loaded = zoo.load("smollm2-135m")
    base, tok = loaded.model.eval(), loaded.tokenizer
    test_ids = pydoc_text_blocks(tok, 8, 256, split="test")
    prompt = test_ids[:1, :16]
    widths = sorted({m.in_features for m in base.modules() if isinstance(m, torch.nn.Linear)})
    if any(w % args.group_size for w in widths):
        parser.error(f"--group-size {args.group_size} does not divide every Linear's input width {widths}; "
                     "compressed-tensors holds whole groups only (try 64 or 32)")

    cfg = SmashConfig({"gptq": {"bits": 4, "group_size": args.group_size}}, device="cpu")
    cfg.add_tokenizer(tok)
    cfg.add_data("PyDocText")
    start = time.perf_counter()
    ours = smash(base, cfg, verbose=False)
    gptq_s = time.perf_counter() - start
    folder = Path(args.folder)
    start = time.perf_counter()
    ours.save_pretrained(folder, format="compressed-tensors")
    save_s = time.perf_counter() - start
    size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    print(f"gptq 4-bit g{args.group_size} in {gptq_s:.0f} s; compressed-tensors folder {folder} written in "
          f"{save_s:.1f} s ({size / 1e6:.1f} MB of safetensors)", flush=True)

    start = time.perf_counter()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        str(folder), quantization_config=transformers.CompressedTensorsConfig(dequantize=True)).eval()
    hf_load_s = time.perf_counter() - start
    start = time.perf_counter()
    imported = SmashedModel.from_pretrained(folder)
    sk_load_s = time.perf_counter() - start
    packed = sum(isinstance(m, PackedLinear) for m in imported.model.modules())
    print(f"loaded: transformers {hf_load_s:.1f} s, slimkit import {sk_load_s:.1f} s ({packed} packed layers)",
          flush=True)

    ppl = {"slimkit (its own gptq model)": plain_perplexity(ours, test_ids),
           "transformers running DIR": plain_perplexity(theirs, test_ids),
           "slimkit running DIR": plain_perplexity(imported, test_ids),
           "fp32 (before quantization)": plain_perplexity(base, test_ids)}
    for k, v in ppl.items():
        print(f"perplexity {k}: {v:.4f}", flush=True)

    def decode(model):
        return model.generate(prompt, max_new_tokens=args.decode_tokens, min_new_tokens=args.decode_tokens,
                              do_sample=False, pad_token_id=tok.eos_token_id)

    timed = {"slimkit running DIR": lambda: decode(imported), "transformers running DIR": lambda: decode(theirs)}
    samples = interleaved_samples(timed, repeats=args.decode_repeats, warmup=1, threads=args.threads)
    ms = {k: statistics.median(v) for k, v in samples.items()}
    same_tokens = torch.equal(decode(imported), decode(theirs))

    own = ppl["slimkit (its own gptq model)"]
    rows = []
    for key, value in ppl.items():
        tps = args.decode_tokens / (ms[key] / 1000) if key in ms else None
        rows.append([key, f"{value:.4f}", f"{100 * (value / own - 1):+.4f}%",
                     "-" if tps is None else f"{tps:.1f}",
                     "-" if key not in ms else f"{ms['transformers running DIR'] / ms[key]:.2f}x"])
    print(f"\nSmolLM2-135M gptq 4-bit g{args.group_size} asym -> compressed-tensors; {machine_line(args.threads)}")
    print(f"perplexity: PyDocText test, 8 x 256 tokens, one plain loop for every model; decode: greedy, "
          f"{args.decode_tokens} new tokens after a 16-token prompt, median of {args.decode_repeats} round-robin runs")
    print_table(["model", "perplexity", "vs slimkit's own", "decode tok/s", "decode vs transformers"], rows)
    print(f"greedy tokens identical between slimkit and transformers running DIR: {same_tokens}")
    gap = abs(ppl["transformers running DIR"] / own - 1)
    print(f"target: transformers' perplexity on DIR within 0.1 % of slimkit's own: {100 * gap:.4f} % -> "
          f"{'MET' if gap <= 1e-3 else 'NOT MET'}")


if __name__ == "__main__":
    main()
