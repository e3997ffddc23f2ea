"""slimkit's default MiniLM recipe vs fp32 and plain torch.ao quantize_dynamic, measured in one run.

    .venv/bin/python benchmarks/smash_minilm.py [--repeats 20] [--threads 2] [--batch 32] [--seq 128]

Prints latency (median, interleaved), speedup vs fp32, size on disk, embedding cosine vs fp32 (mean / min) and
retrieval top-1 on the zoo's sentence pairs, then checks that slimkit's save/load round-trip is exact.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_latency, machine_line, print_table  # noqa: E402  (sets OMP_WAIT_POLICY first)

# isort: split
import torch  # noqa: E402

from slimkit import SmashConfig, SmashedModel, smash, zoo  # noqa: E402
from slimkit.demo import DEFAULT_RECIPES, retrieval_top1  # noqa: E402
from slimkit.evaluation import fidelity, size_on_disk  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    loaded = zoo.load("minilm", batch_size=args.batch, seq_len=args.seq)
    base, inputs, tok = loaded.model.eval(), loaded.example_inputs, loaded.tokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic

        torch.backends.quantized.engine = "fbgemm"
        plain = quantize_dynamic(zoo.load("minilm").model.eval(), {torch.nn.Linear}, dtype=torch.qint8)

    recipe = DEFAULT_RECIPES["minilm"]
    slim = smash(base, SmashConfig(recipe, device="cpu"), verbose=False)

    models = {"fp32": base, "torch.ao quantize_dynamic": plain, f"slimkit {recipe}": slim}
    lat = interleaved_latency({k: (lambda m=m: m(**inputs)) for k, m in models.items()},
                              repeats=args.repeats, warmup=args.warmup, threads=args.threads)
    rows = []
    for name, model in models.items():
        fid = fidelity(base, model, inputs)
        rows.append([name, f"{lat[name]:.1f}", f"{lat['fp32'] / lat[name]:.2f}x",
                     f"{size_on_disk(model) / 1e6:.1f}", f"{fid.cosine_mean:.4f}", f"{fid.cosine_min:.4f}",
                     f"{retrieval_top1(model, tok):.3f}"])
    print(f"MiniLM-L6 sentence embeddings, batch {args.batch} x {args.seq} tokens; {machine_line(args.threads)}")
    print_table(["model", "latency ms (median)", "speedup", "size MB", "cosine mean", "cosine min", "top-1"], rows)

    with tempfile.TemporaryDirectory() as tmp:
        slim.save_pretrained(Path(tmp) / "m")
        again = SmashedModel.from_pretrained(Path(tmp) / "m")
        with torch.inference_mode():
            exact = torch.equal(again(**inputs), slim(**inputs))
    print(f"save/load round-trip reproduces slimkit outputs exactly: {exact}")


if __name__ == "__main__":
    main()
