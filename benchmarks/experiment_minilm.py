"""Joint search on the real MiniLM encoder: FFN-channel pruning x int8 recipes x ONNX Runtime, latency vs cosine.

slimkit's script-free experiment on Optuna (NSGA-II, seeded) over all-MiniLM-L6-v2 (zoo ``minilm``): pruner in
{none, l1_filter on the six FFN ``intermediate.dense`` layers with its sparsity (speedup removes the channels
from ``output.dense`` too)}, quantizer in {none, int8_dynamic, int8_smooth}, compiler in {none, onnxruntime with
quantize none|int8_dynamic}. Each trial smashes the encoder, measures the mean cosine of its sentence
embeddings to the fp32 encoder's on an 8 x 64 batch of the zoo's sentence pairs and the median latency of that
batch, and keeps only the Pareto set. The registry refuses a slimkit quantizer before onnxruntime (which
quantizes with its own ``onnxruntime_quantize``): those trials fail at once and are counted.
``--copy-plot`` copies ``pareto.png`` (e.g. into docs/).

    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/experiment_minilm.py --n-samples 30
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_latency, machine_line, print_table  # noqa: E402

from slimkit.engine import smash  # noqa: E402
from slimkit.experiment import load_experiment, report_experiment, run_experiment  # noqa: E402
from slimkit.experiment.bench import Bench  # noqa: E402
from slimkit.utils import run_model  # noqa: E402

SEARCH = {
    "pruner": [None, "l1_filter"],
    "l1_filter_sparsity": {"range": [0.1, 0.7], "type": "float"},
    "l1_filter_op_names": ["*intermediate.dense"],
    "quantizer": [None, "int8_dynamic", "int8_smooth"],
    "compiler": [None, "onnxruntime"],
    "onnxruntime_quantize": ["none", "int8_dynamic"],
}
RUNTIME = {"repeats": 7, "warmup": 2}
#: recipes re-measured beside the front whether or not the search reached them (same run, same noise)
REFERENCES = {"int8_dynamic": {"quantizer": "int8_dynamic"},
              "onnxruntime": {"compiler": "onnxruntime"},
              "onnxruntime int8": {"compiler": "onnxruntime", "onnxruntime_quantize": "int8_dynamic"}}
BATCH, SEQ = 8, 64


def minilm_batch():
    """The zoo MiniLM with an 8 x 64 example batch (its pair sentences; the default 32 x 128 is slow to time)."""
    from slimkit import zoo

    return zoo.load("minilm", batch_size=BATCH, seq_len=SEQ)


def _block(title: str, models: dict, labels: dict, bench: Bench, threads: int, repeats: int) -> None:
    fns = {name: (lambda m=m: run_model(m, bench.inputs)) for name, m in models.items()}
    ms = interleaved_latency(fns, repeats=repeats, warmup=2, threads=threads)
    print(f"\n{title}: {repeats} forwards each, round-robin with the fp32 base ({ms['fp32 base']:.1f} ms):")
    rows = [[name, recipe, f"{cosine:.4f}", f"{ms[name]:.1f}", f"{ms['fp32 base'] / ms[name]:.2f}x"]
            for name, (recipe, cosine) in labels.items()]
    print_table(["trial", "recipe", "cosine", "latency ms", "speedup vs fp32"], rows)


def remeasure(bench: Bench, exp, result, threads: int, repeats: int) -> None:
    """Time the front's recipes (and REFERENCES) again, round-robin with the fp32 base, so noise hits all alike.

    ONNX Runtime models are timed in a block of their own: ORT's intra-op threads spin after each run, which
    would slow whatever torch model the round-robin times next.
    """
    blocks: dict[bool, tuple[dict, dict]] = {False: ({"fp32 base": bench.base}, {}),
                                             True: ({"fp32 base": bench.base}, {})}
    recipes = [(f"#{r['number']}", r["params"], r["recipe"], r["values"]["cosine"])
               for r in sorted(result.best, key=lambda r: r["values"]["latency"])]
    recipes += [(name, settings, "(reference) " + name, None) for name, settings in REFERENCES.items()]
    for name, settings, recipe, cosine in recipes:
        cfg = exp.smash_space.config(settings)
        cfg.add_model_defaults(bench.loaded)
        model = smash(bench.base, cfg)
        cosine = bench.measure(model, ["cosine"])["cosine"] if cosine is None else cosine
        models, labels = blocks["onnxruntime" in cfg.get_active_algorithms()]
        models[name], labels[name] = model, (recipe, cosine)
    _block("the front re-measured (torch models)", *blocks[False], bench, threads, repeats)
    if blocks[True][1]:
        _block("ONNX Runtime models", *blocks[True], bench, threads, repeats)


def main() -> None:
    """Run the joint search, print the front and where the plots are."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=None, help="folder for the experiment (default: a temp dir)")
    parser.add_argument("--copy-plot", default=None, metavar="PNG", help="copy the Pareto plot here")
    parser.add_argument("--remeasure-repeats", type=int, default=15)
    parser.add_argument("--reuse", action="store_true", help="reuse the search already in --output")
    args = parser.parse_args()
    folder = Path(args.output or tempfile.mkdtemp(prefix="slimkit-exp-minilm-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(machine_line(args.threads))
    runtime = {**RUNTIME, "threads": args.threads}
    source = "experiment_minilm:minilm_batch"  # this file, importable: its folder is on sys.path
    bench = Bench(source, {"cosine": "max", "latency": "min"}, runtime_args=runtime)
    base = bench.measure(bench.base, ["latency"])
    print(f"base MiniLM (fp32, batch {BATCH} x {SEQ}): latency {base['latency']:.1f} ms, {base['size'] / 1e6:.1f} MB, "
          f"{base['params'] / 1e6:.2f} M params")
    spec = {"name": "minilm_joint", "model": source, "n_samples": args.n_samples, "proposer": "nsga2",
            "random_seed": args.seed, "job_timeout": 300, "runtime_args": runtime, "search": SEARCH,
            "objectives": {"cosine": "max", "latency": "min"}}
    path = folder / "minilm_joint.json"
    path.write_text(json.dumps(spec, indent=2))
    started = time.perf_counter()
    if args.reuse and (folder / "minilm_joint" / "results.json").is_file():
        result = report_experiment(folder / "minilm_joint", quiet=True)  # re-measure an earlier search's front
    else:
        result = run_experiment(path, automatic=True, folder=folder / "minilm_joint", quiet=True)
    seconds = time.perf_counter() - started
    print(f"\njoint search: {len(result.rows)} trials in {seconds:.0f} s ({result.counts()}); Pareto front "
          f"({len(result.best)} points, cosine max / latency min):")
    rows = [[f"#{r['number']}", r["recipe"], f"{r['cosine']:.4f}", f"{r['latency']:.1f}",
             f"{r['measured']['size'] / 1e6:.1f}"] for r in sorted(result.best, key=lambda r: r["latency"])]
    print_table(["trial", "recipe", "cosine", "latency ms (in the search)", "size MB"], rows)
    reasons: dict[str, int] = {}
    for r in result.rows:
        if r["state"] == "failed":
            reasons[r["reason"][:110]] = reasons.get(r["reason"][:110], 0) + 1
    for reason, n in reasons.items():
        print(f"failed x{n}: {reason}")
    for name, scores in result.importance.items():
        print(f"importance for {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(scores.items(),
                                                                                     key=lambda kv: -kv[1])))
    print(f"plots: {', '.join(str(p) for p in result.files if p.suffix == '.png')}")
    remeasure(bench, load_experiment(path, True), result, args.threads, args.remeasure_repeats)
    if args.copy_plot:
        shutil.copyfile(result.folder / "pareto.png", args.copy_plot)


if __name__ == "__main__":
    main()
