"""Streaming gptq against in-memory gptq on the real SmolLM2-135M: same packed tensors? same perplexity? peak RSS?

    .venv/bin/python benchmarks/stream_smollm2.py [--samples 16] [--threads 2] [--work DIR] [--keep]

The zoo's SmolLM2-135M cache (an fp32 safetensors folder with its tokenizer, made offline from the packaged GGUF)
is smashed twice with the same SmashConfig (gptq 4-bit group 128, ``--samples`` x 512 PyDocText calibration tokens),
each in a fresh process through ``slimkit.smash_folder``: once streamed block by block (``stream=True``), once
in memory (``stream=False``: the whole model loaded, ``smash(..., copy_model=False)``, saved). Each child reports
its peak resident set (VmHWM, imports included) and wall time. Then the two saves' tensors are compared name by
name (bit-equal, or how many differ and by how much), and both reloads are scored by perplexity on the
PyDocText test split (8 x 256 tokens), next to the fp32 model's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402
from common import machine_line, print_table  # noqa: E402
from safetensors import safe_open  # noqa: E402

from slimkit import SmashConfig, SmashedModel, smash_folder, zoo  # noqa: E402
from slimkit.data import pydoc_text_blocks  # noqa: E402
from slimkit.engine.stream import memory  # noqa: E402
from slimkit.evaluation import perplexity  # noqa: E402
from slimkit.zoo.smollm2 import cache_path  # noqa: E402


def config(folder: Path, samples: int) -> SmashConfig:
    cfg = SmashConfig({"gptq": {"bits": 4, "group_size": 128, "n_calibration_samples": samples, "seq_len": 512}},
                      device="cpu")
    cfg.add_tokenizer(str(folder))
    cfg.add_data("PyDocText")
    return cfg


def child(folder: str, out: str, stream: bool, samples: int, threads: int) -> None:
    """One smash in this fresh process; prints its peak RSS and wall time as a JSON line."""
    torch.set_num_threads(threads)
    start = time.perf_counter()
    result = smash_folder(folder, config(Path(folder), samples), out, stream=stream, progress=False)
    print("RESULT " + json.dumps({"peak_rss": memory.peak_rss_bytes(), "wall": time.perf_counter() - start,
                                  "streamed": result.streamed, "output_bytes": result.output_bytes}), flush=True)


def run_child(folder: Path, out: Path, stream: bool, samples: int, threads: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, __file__, "--child", str(folder), str(out), "1" if stream else "0", str(samples),
           str(threads)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{'streaming' if stream else 'in-memory'} smash failed:\n{proc.stderr[-4000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def tensors(folder: Path) -> dict[str, tuple[Path, str]]:
    found = {}
    for file in sorted(folder.rglob("*.safetensors")):
        with safe_open(str(file), "pt") as handle:
            found.update({k: (file, k) for k in handle.keys()})
    return found


def compare(a: Path, b: Path) -> dict:
    """Tensor-by-tensor comparison of two saves: names only in one, bit-equal, differing (with max |diff|)."""
    left, right = tensors(a), tensors(b)
    report = {"only_streamed": sorted(set(left) - set(right)), "only_in_memory": sorted(set(right) - set(left)),
              "equal": 0, "differ": []}
    for name in sorted(set(left) & set(right)):
        with safe_open(str(left[name][0]), "pt") as x, safe_open(str(right[name][0]), "pt") as y:
            s, t = x.get_tensor(name), y.get_tensor(name)
        if s.dtype == t.dtype and s.shape == t.shape and torch.equal(s, t):
            report["equal"] += 1
            continue
        if s.shape != t.shape or s.dtype != t.dtype:
            report["differ"].append(f"{name}: {s.dtype}{tuple(s.shape)} vs {t.dtype}{tuple(t.shape)}")
            continue
        diff = (s.double() - t.double()).abs()
        report["differ"].append(f"{name}: {int((diff > 0).sum())}/{diff.numel()} entries differ, "
                                f"max |diff| {float(diff.max()):.3g}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=16, help="calibration samples of 512 tokens (default 16)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "slimkit-stream-smollm2"))
    parser.add_argument("--keep", action="store_true", help="keep both outputs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_line(args.threads), flush=True)
    loaded = zoo.load("smollm2-135m")  # makes the cache folder on first use
    folder = cache_path()
    work = Path(args.work)
    outs = {"streamed": work / "streamed", "in memory": work / "in-memory"}
    for out in outs.values():
        shutil.rmtree(out, ignore_errors=True)
    figures = {}
    for label, out in outs.items():
        figures[label] = run_child(folder, out, label == "streamed", args.samples, args.threads)
        print(f"{label}: peak RSS {figures[label]['peak_rss'] / 1e6:.0f} MB, wall {figures[label]['wall']:.0f} s, "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
    report = compare(outs["streamed"], outs["in memory"])
    print(f"tensors: {report['equal']} bit-equal; differ: {len(report['differ'])}; only in the streamed save: "
          f"{report['only_streamed']}; only in the in-memory save: {report['only_in_memory']}", flush=True)
    for line in report["differ"][:20]:
        print("  " + line)
    test_ids = pydoc_text_blocks(loaded.tokenizer, 8, 256, split="test")
    ppl = {"fp32": perplexity(loaded.model.eval(), test_ids)}
    for label, out in outs.items():
        ppl[label] = perplexity(SmashedModel.from_pretrained(out).eval(), test_ids)
    rows = [["fp32 (no quantization)", f"{ppl['fp32']:.3f}", "-", "-", "-"]]
    base = figures["in memory"]["peak_rss"]
    for label in outs:
        f = figures[label]
        rows.append([f"gptq 4-bit g128, {label}", f"{ppl[label]:.3f}", f"{f['peak_rss'] / 1e6:.0f}",
                     f"{f['peak_rss'] / base:.2f}", f"{f['wall']:.0f}"])
    print_table(["model", "perplexity (PyDocText test, 8 x 256)", "peak RSS MB", "vs in memory", "wall s"], rows)
    ratio = figures["streamed"]["peak_rss"] / base
    print(f"target: streamed peak <= 0.6x in-memory: {ratio:.2f}x -> {'MET' if ratio <= 0.6 else 'NOT MET'}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4] == "1", int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
