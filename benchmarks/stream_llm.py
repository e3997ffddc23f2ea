"""Streaming quantization of Llama-shaped checkpoints (1B, 3B, 8B) in bounded memory: peak RSS and wall time.

    .venv/bin/python benchmarks/stream_llm.py [--sizes 1b 3b 8b] [--methods rtn gptq] [--samples 8]
        [--gptq-blocks K] [--work DIR] [--keep] [--gguf] [--threads 2] [--device cuda] [--tokenizer DIR]

For each size, a random-initialised Llama of that shape is written as bf16 safetensors shards (2 GB each, with
``model.safetensors.index.json``), tensor by tensor and in row chunks, so writing it never holds the model either;
free disk is checked first (the checkpoint, the output and its staging copy). Then each method runs in a fresh
process through ``slimkit.smash_folder(..., stream=True)``: rtn 4-bit group 128, and gptq 4-bit group 128 with
``--samples`` x 512 calibration tokens of PyDocText (SmolLM2's tokenizer, saved into the folder); ``--gptq-blocks K``
stops gptq after K blocks (they all have the same size, so the peak is the run's) when a full run is too long. The child
reports the process's peak resident set (VmHWM, imports included) and the wall time; the table prints both per
size and method, with the model's own size beside them. ``--gguf`` makes the rtn run write GGUF instead
(llama_cpp, Q8_0 embedding; the peak RSS is taken before loading) and has llama.cpp load it and generate 8 tokens.
Checkpoints and outputs are deleted afterwards (staging folders of partial runs too) unless ``--keep``.
``--device cuda`` runs each block on the GPU (``SmashConfig(device="cuda")``: weights, Hessians and calibration of one
block in GPU memory) and adds the GPU's peak allocated memory to the notes.
Shapes (Llama 3.x): 1B hidden 2048 x 16 layers, ffn 8192, 32/8 heads, tied; 3B 3072 x 28, ffn 8192, 24/8, tied;
8B 4096 x 32, ffn 14336, 32/8, untied; vocabulary 128256.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
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

SHAPES = {
    "tiny": dict(hidden_size=256, num_hidden_layers=2, intermediate_size=512, num_attention_heads=4,
                 num_key_value_heads=2, tie_word_embeddings=False),  # a smoke test of the script itself
    "1b": dict(hidden_size=2048, num_hidden_layers=16, intermediate_size=8192, num_attention_heads=32,
               num_key_value_heads=8, tie_word_embeddings=True),
    "3b": dict(hidden_size=3072, num_hidden_layers=28, intermediate_size=8192, num_attention_heads=24,
               num_key_value_heads=8, tie_word_embeddings=True),
    "8b": dict(hidden_size=4096, num_hidden_layers=32, intermediate_size=14336, num_attention_heads=32,
               num_key_value_heads=8, tie_word_embeddings=False),
}
TARGETS = {("8b", "rtn"): 2.5e9, ("8b", "gptq"): 4e9}
SHARD_BYTES = 2 * 10**9
CHUNK_ELEMENTS = 2**24


def llama_config(size: str):
    import transformers

    return transformers.LlamaConfig(vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
                                    rms_norm_eps=1e-5, architectures=["LlamaForCausalLM"], bos_token_id=1,
                                    eos_token_id=2, torch_dtype="bfloat16", **SHAPES[size])


def tensor_shapes(config) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the checkpoint (a meta-device build: no memory)."""
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    return {n: tuple(t.shape) for n, t in model.state_dict().items() if not n.startswith("lm_head") or
            not config.tie_word_embeddings}


def write_checkpoint(folder: Path, size: str, seed: int = 0, tokenizer: str | None = None) -> int:
    """A random bf16 Llama of shape ``size`` as safetensors shards, written tensor by tensor; returns its bytes."""
    import torch

    from slimkit.zoo import load as zoo_load

    config = llama_config(size)
    shapes = tensor_shapes(config)
    folder.mkdir(parents=True, exist_ok=True)
    shards: list[list[str]] = [[]]
    used = 0
    for name, shape in shapes.items():
        nbytes = 2 * int(torch.Size(shape).numel())
        if shards[-1] and used + nbytes > SHARD_BYTES:
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += nbytes
    generator = torch.Generator().manual_seed(seed)
    weight_map, total = {}, 0
    for i, names in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for name in names:
            n = 2 * int(torch.Size(shapes[name]).numel())
            header[name] = {"dtype": "BF16", "shape": list(shapes[name]), "data_offsets": [offset, offset + n]}
            offset += n
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with open(folder / file, "wb") as out:
            out.write(struct.pack("<Q", len(raw)) + raw)
            for name in names:
                shape = shapes[name]
                numel = int(torch.Size(shape).numel())
                if len(shape) == 1:  # norms: ones, as a trained model's are near one
                    out.write(torch.ones(numel, dtype=torch.bfloat16).view(torch.uint8).numpy().tobytes())
                    continue
                std = 0.02 if "embed" in name or "lm_head" in name else shape[1] ** -0.5
                for start in range(0, numel, CHUNK_ELEMENTS):
                    count = min(CHUNK_ELEMENTS, numel - start)
                    chunk = (torch.randn(count, generator=generator) * std).to(torch.bfloat16)
                    out.write(chunk.view(torch.uint8).numpy().tobytes())
        weight_map.update({n: file for n in names})
        total += offset
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                     "weight_map": weight_map}))
    config.save_pretrained(folder)
    if tokenizer:  # a saved tokenizer folder (a GPU machine has no zoo packages)
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(tokenizer).save_pretrained(folder)
    else:
        zoo_load("smollm2-135m").tokenizer.save_pretrained(folder)  # a real tokenizer (49152 ids < 128256), offline
    return total


def _stop_after(out: Path, blocks: int, start: float) -> None:
    """Watch the run's record; once ``blocks`` blocks are finished, report and end the process (a partial run)."""
    from slimkit.engine.stream import memory

    record = out.parent / f"{out.name}.partial" / "run.json"
    while True:
        try:
            done = json.loads(record.read_text())["blocks_done"]
        except (OSError, ValueError, KeyError):
            done = 0
        if done >= blocks:
            figures = {"peak_rss": memory.peak_rss_bytes(), "wall": time.perf_counter() - start, "blocks": done,
                       "run_seconds": time.perf_counter() - start, "output_bytes": 0}
            if torch.cuda.is_initialized():
                figures["gpu_peak"] = torch.cuda.max_memory_allocated()
            print("RESULT " + json.dumps(figures), flush=True)
            os._exit(0)
        time.sleep(0.5)


def child(folder: str, method: str, out: str, samples: int, threads: int, gguf: bool, blocks: int = 0,
          device: str = "cpu") -> None:
    """One streaming run in this (fresh) process; prints a JSON line with the peak RSS and the wall time.

    ``blocks > 0`` stops the run once that many blocks are finished (every block of these models has the same
    size, so the peak is the whole run's; the run could be resumed later with the same call).
    """
    import threading

    import torch

    from slimkit import SmashConfig, smash_folder
    from slimkit.engine.stream import memory

    torch.set_num_threads(threads)
    start = time.perf_counter()
    if blocks:
        threading.Thread(target=_stop_after, args=(Path(out), blocks, start), daemon=True).start()
    algorithms = {"rtn": {"bits": 4, "group_size": 128}} if method == "rtn" else \
        {"gptq": {"bits": 4, "group_size": 128, "n_calibration_samples": samples, "seq_len": 512}}
    if gguf:
        algorithms["llama_cpp"] = {"dtype": "q8_0", "n_ctx": 256}
    cfg = SmashConfig(algorithms, device=device)
    cfg.add_tokenizer(folder)
    if method == "gptq":
        cfg.add_data("PyDocText")
    result = smash_folder(folder, cfg, out, stream=True)
    figures = {"peak_rss": memory.peak_rss_bytes(), "wall": time.perf_counter() - start,
               "run_seconds": result.seconds, "output_bytes": result.output_bytes, "blocks": result.blocks}
    if device.startswith("cuda"):
        figures["gpu_peak"] = torch.cuda.max_memory_allocated()
    if gguf:
        from slimkit import SmashedModel

        load = time.perf_counter()
        model = SmashedModel.from_pretrained(out)
        figures["gguf_load_seconds"] = time.perf_counter() - load
        ids = torch.tensor([[1, 450, 4996, 17354, 1701]])
        gen = time.perf_counter()
        tokens = model.generate(ids, max_new_tokens=8)
        figures["generated"] = int(tokens.shape[-1] - ids.shape[-1])
        figures["tokens_per_second"] = figures["generated"] / (time.perf_counter() - gen)
    print("RESULT " + json.dumps(figures), flush=True)


def run_child(folder: Path, method: str, out: Path, samples: int, threads: int, gguf: bool = False,
              blocks: int = 0, device: str = "cpu") -> dict:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, __file__, "--child", str(folder), method, str(out), str(samples), str(threads),
           "1" if gguf else "0", str(blocks), device]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{method} on {folder} failed:\n{proc.stderr[-4000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["1b", "3b", "8b"], choices=sorted(SHAPES))
    parser.add_argument("--methods", nargs="+", default=["rtn", "gptq"], choices=["rtn", "gptq"])
    parser.add_argument("--samples", type=int, default=8, help="gptq calibration samples of 512 tokens (default 8)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "slimkit-stream-bench"),
                        help="scratch folder for checkpoints and outputs (default: under the system temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints and outputs")
    parser.add_argument("--gguf", action="store_true", help="the rtn run writes GGUF, then loaded and run by llama.cpp")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda: where each block is quantized")
    parser.add_argument("--tokenizer", metavar="DIR",
                        help="a saved tokenizer folder to put in the checkpoints (default: SmolLM2's from the zoo)")
    parser.add_argument("--gptq-blocks", type=int, default=0, metavar="K",
                        help="stop gptq runs after K blocks (all blocks have the same size, so the peak is the "
                             "run's; the table says K/N): for the long runs on a small machine")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    print(machine_line(args.threads))
    rows = []
    for size in args.sizes:
        config = llama_config(size)
        model_bytes = 2 * sum(int(torch.Size(s).numel()) for s in tensor_shapes(config).values())
        free = shutil.disk_usage(work).free  # checkpoint + output (about a third) + its staged pieces
        if free < 2.2 * model_bytes:
            raise SystemExit(f"{size}: {model_bytes / 1e9:.1f} GB checkpoint + outputs need about "
                             f"{2.2 * model_bytes / 1e9:.0f} GB free in {work}; only {free / 1e9:.0f} GB are.")
        folder = work / f"llama-{size}"
        began = time.perf_counter()
        if not (folder / "config.json").is_file():
            write_checkpoint(folder, size, tokenizer=args.tokenizer)
        print(f"{size}: checkpoint {model_bytes / 1e9:.2f} GB bf16 ready in {time.perf_counter() - began:.0f} s",
              flush=True)
        runs = [(m, args.gguf and m == "rtn") for m in args.methods]
        for method, gguf in runs:
            out = work / f"out-{size}-{method}{'-gguf' if gguf else ''}"
            staging = out.parent / f"{out.name}.partial"  # a partial run (--gptq-blocks) leaves its staging folder
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(staging, ignore_errors=True)
            stop = args.gptq_blocks if method == "gptq" and not gguf else 0
            figures = run_child(folder, method, out, args.samples, args.threads, gguf, stop, args.device)
            target = TARGETS.get((size, method))
            label = method + (f" ({args.samples} x 512 tokens)" if method == "gptq" else "")
            label += (" -> GGUF" if gguf else "") + (f" on {args.device}" if args.device != "cpu" else "")
            extra = (f"llama.cpp: {figures['generated']} tokens at {figures['tokens_per_second']:.1f} tok/s"
                     if gguf else "")
            verdict = "" if target is None else \
                f"{target / 1e9:.1f} ({'MET' if figures['peak_rss'] <= target else 'NOT MET'})"
            layers = config.num_hidden_layers
            blocks = f"{figures['blocks']}/{layers}"
            if "gpu_peak" in figures:
                extra = (extra + "; " if extra else "") + f"GPU peak {figures['gpu_peak'] / 1e9:.2f} GB"
            if figures["blocks"] < layers:
                extra = (extra + "; " if extra else "") + "partial run: wall time for the blocks done"
            rows.append([size, f"{model_bytes / 1e9:.2f}", label, blocks, f"{figures['peak_rss'] / 1e9:.2f}", verdict,
                         f"{figures['wall']:.0f}", f"{figures['output_bytes'] / 1e9:.2f}", extra])
            print(" | ".join(rows[-1]), flush=True)
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(staging, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    print_table(["size", "checkpoint GB (bf16)", "method", "blocks", "peak RSS GB", "target GB", "wall s", "output GB",
                 "notes"], rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7] == "1",
              int(sys.argv[8]) if len(sys.argv) > 8 else 0, sys.argv[9] if len(sys.argv) > 9 else "cpu")
    else:
        main()
