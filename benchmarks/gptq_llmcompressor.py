"""The same GPTQ job with slimkit and with llm-compressor, side by side: wall time, peak memory, output error.

    .venv/bin/python benchmarks/gptq_llmcompressor.py --llmc-python /work/llmc-venv/bin/python      # CPU, small shape
    python3 benchmarks/gptq_llmcompressor.py --device cuda --llmc-site DIR                        # GPU, 1B shape

The job: a Llama-shaped model built from a config with seeded random weights (``--shape 1b``: Llama-3.2-1B's shape,
the default on CUDA, in bf16; ``--shape small``: SmolLM2-135M's with hidden 512, a multiple of the group size as
llm-compressor requires, the default on the CPU, in float32), the same
``--samples`` x ``--seq-len`` (32 x 512) random token rows (fixed seed), every Linear but ``lm_head`` quantized
to 4 bits, groups of 128, symmetric, static activation order, damping 0.01, blocks of 128 columns, no clipping
search, one calibration row per forward. slimkit runs ``quantize_model_gptq`` in this process; llm-compressor runs
``oneshot(model, recipe=GPTQModifier(targets="Linear", scheme="W4A16", ignore=["lm_head"]), dataset=DataLoader)``
in its own environment, a subprocess of this script: ``--llmc-python`` (a virtual environment with
llm-compressor and the versions it pins) or, with ``--llmc-site DIR``, this interpreter with ``DIR`` (those
packages installed with ``pip --target``) first on its path. Both sides put the whole model on the device first.

Printed per side: the wall time of the quantization call alone (imports and model building excluded), the peak
memory during it (CUDA: ``torch.cuda.max_memory_allocated``, the model included; CPU: the process's peak resident
set, VmHWM, reset before the call), and the quantized model's logit error against the float model on one held-out
row (relative RMS), so equal work is visible; then the ratios. On CUDA the slimkit side also reports whether its
fused Triton column sweep ran and how many custom operators were registered during the call, and
``--torch-loop`` adds a second slimkit run with the fused sweep turned off (``SLIMKIT_GPTQ_TRITON=0``).

``--live-bytes`` runs slimkit's side alone under :class:`~slimkit.engines.quantization.lowbit.memory_trace.LiveBytes`
(no llm-compressor needed) and prints its peak of live tensor bytes with the code lines holding them. On the CPU
the CUDA run's memory-relevant branches are taken (``cuda_paths``), so the GPU path's working set is seen without a
GPU; on CUDA the allocator's own peak is printed beside it (the difference is what kernels allocate inside
themselves: cuBLAS/cuSOLVER workspaces). ``--layers`` cuts the model to its first blocks (the peak is reached in
block 0 now that no dense copy of a quantized block is kept):

    .venv/bin/python benchmarks/gptq_llmcompressor.py --live-bytes --shape 1b --layers 2 --samples 8
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

# set before torch loads its OpenMP runtime, here and (inherited) in llm-compressor's process: spinning workers make
# every small parallel op of a GPTQ column loop take milliseconds on a shared CPU
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

SHAPES = {  # vocabulary, hidden, layers, ffn, heads, kv heads, rope theta, tied embeddings
    "1b": dict(vocab_size=128256, hidden_size=2048, num_hidden_layers=16, intermediate_size=8192,
               num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0, tie_word_embeddings=True),
    # SmolLM2-135M's depth, vocabulary and ffn width with hidden 512 instead of 576: llm-compressor's GPTQ needs
    # every input width to be a multiple of the group size (128)
    "small": dict(vocab_size=49152, hidden_size=512, num_hidden_layers=30, intermediate_size=1536,
                  num_attention_heads=8, num_key_value_heads=4, rope_theta=100000.0, tie_word_embeddings=True),
}
RESULT = "RESULT "


def build(shape: str, device: str, seed: int, layers: int | None = None, dtype: torch.dtype | None = None):
    """The seeded random Llama of ``shape`` on ``device`` (bf16 on CUDA, float32 on the CPU), in eval mode."""
    import transformers

    config = transformers.LlamaConfig(max_position_embeddings=8192, rms_norm_eps=1e-5,
                                      **{**SHAPES[shape], **({"num_hidden_layers": layers} if layers else {})})
    torch.manual_seed(seed)
    dtype = dtype or (torch.bfloat16 if device == "cuda" else torch.float32)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config).to(dtype)
    return model.eval()


def tokens(shape: str, samples: int, seq_len: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``samples`` calibration rows and one held-out row of random token ids (fixed seed)."""
    ids = torch.randint(0, SHAPES[shape]["vocab_size"], (samples + 1, seq_len),
                        generator=torch.Generator().manual_seed(seed + 1))
    return ids[:samples], ids[samples:]


def checksum(model) -> float:
    return float(sum(p.detach().float().abs().sum() for p in model.parameters()))


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids.to(model.device)).logits.float().cpu()


def _peak_reset(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    else:
        Path("/proc/self/clear_refs").write_text("5")


def _peak(device: str) -> int:
    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) * 1024


def timed(device: str, job) -> tuple[float, int]:
    """Seconds and peak memory of ``job()``."""
    _peak_reset(device)
    start = time.perf_counter()
    job()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, _peak(device)


def run_side(side: str, args) -> dict:
    """Build the model, run one side's GPTQ on it, and measure; returns the figures as a dict."""
    model = build(args.shape, args.device, args.seed)
    weights = checksum(model) if args.checksum else float("nan")
    calib, held = tokens(args.shape, args.samples, args.seq_len, args.seed)
    reference = logits(model, held)
    extra: dict = {}
    if side == "llmc":
        job = _llmc_job(model, calib)
        extra["version"] = _version("llmcompressor")
    else:
        job, extra = _slimkit_job(model, calib)
    seconds, peak = timed(args.device, job)
    if side == "slimkit":
        extra = extra["after"]()
    out = logits(model, held)
    error = float((out - reference).pow(2).mean().sqrt() / reference.pow(2).mean().sqrt())
    return dict(side=side, seconds=seconds, peak=peak, logit_rel_rms=error, weights_checksum=weights,
                torch=torch.__version__, transformers=_version("transformers"), **extra)


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def _llmc_job(model, calib: torch.Tensor):
    # llm-compressor's side: imported only in its own environment (the subprocess)
    from llmcompressor import oneshot
    from llmcompressor.modifiers.gptq import GPTQModifier
    from torch.utils.data import DataLoader

    folder = tempfile.mkdtemp(prefix="gptq_llmc_")  # oneshot re-reads the config from model.config.name_or_path
    model.config.save_pretrained(folder)
    model.config.name_or_path = folder
    rows = [{"input_ids": r, "attention_mask": torch.ones_like(r)} for r in calib]
    loader = DataLoader(rows, batch_size=1, shuffle=False)
    recipe = GPTQModifier(targets="Linear", scheme="W4A16", ignore=["lm_head"], block_size=128,
                          dampening_frac=0.01, actorder="static")
    return lambda: oneshot(model=model, recipe=recipe, dataset=loader, processor=_offline_tokenizer(),
                           num_calibration_samples=len(rows), max_seq_length=calib.shape[1],
                           shuffle_calibration_samples=False)


def _offline_tokenizer():
    """A one-word tokenizer built in memory: oneshot wants a processor with a dataset (the rows are token ids)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")),
                                   unk_token="<unk>")


def _slimkit_job(model, calib: torch.Tensor):
    # slimkit's side: imported only in this process (the subprocess's environment has no slimkit)
    import torch._library.custom_ops as custom_ops

    from slimkit.engines.quantization.lowbit import gptq_columns
    from slimkit.engines.quantization.lowbit.quantize import quantize_model_gptq

    registered: dict[str, int] = {}
    original = custom_ops.CustomOpDef._register_to_dispatcher

    def counting(self, *a, **k):  # keyed by the op and the first caller outside torch and the import machinery
        frames = [f for f in traceback.extract_stack()[:-1]
                  if "/torch/" not in f.filename and "<frozen" not in f.filename]
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
        key = f"{self._qualname} from {where}"
        registered[key] = registered.get(key, 0) + 1
        return original(self, *a, **k)

    def job():
        custom_ops.CustomOpDef._register_to_dispatcher = counting
        try:
            quantize_model_gptq(model, calib, bits=4, group_size=128, sym=True, act_order=True, damp=0.01,
                                block_size=128, exclude=("lm_head",), batch_size=1, clip_search=False)
        finally:
            custom_ops.CustomOpDef._register_to_dispatcher = original

    def after() -> dict:
        return dict(fused_sweep=bool(gptq_columns._STATE.get("checked")), triton_ready=gptq_columns.triton_ready(),
                    custom_ops_registered=sum(registered.values()),
                    custom_ops=sorted(registered.items(), key=lambda kv: -kv[1])[:10])

    return job, {"after": after}


def live_bytes(args) -> None:
    """slimkit's GPTQ under LiveBytes (module doc): peak live tensor bytes and what held them."""
    from slimkit.engines.quantization.lowbit import memory_trace
    from slimkit.engines.quantization.lowbit.quantize import quantize_model_gptq

    model = build(args.shape, args.device, args.seed, args.layers, torch.bfloat16)
    calib, _ = tokens(args.shape, args.samples, args.seq_len, args.seed)
    model_bytes = sum(t.numel() * t.element_size() for t in memory_trace.tensors_of(model))
    cuda = args.device == "cuda"
    internal = {} if cuda else memory_trace.CUDA_INTERNAL  # on a GPU its allocator sees them itself
    _peak_reset(args.device)
    start = time.perf_counter()
    # the parameters are handed over in a temporary list: a reference kept here would keep every replaced weight alive
    with (memory_trace.cuda_paths() if not cuda else _nothing()), \
            memory_trace.LiveBytes(memory_trace.tensors_of(model), internal) as live:
        quantize_model_gptq(model, calib, bits=4, group_size=128, sym=True, act_order=True, damp=0.01,
                            block_size=128, exclude=("lm_head",), batch_size=1, clip_search=False)
        left = live.live_bytes()
    seconds = time.perf_counter() - start
    where = "the CUDA path, run on the CPU" if not cuda else "CUDA"
    print(f"live bytes ({where}; {args.shape} shape, {args.layers or SHAPES[args.shape]['num_hidden_layers']} "
          f"blocks, bf16, {args.samples} x {args.seq_len} tokens, {seconds:.0f} s): model {model_bytes / 1e9:.3f} GB, "
          f"peak {live.peak.bytes / 1e9:.3f} GB (+{(live.peak.bytes - model_bytes) / 1e9:.3f} over the model), "
          f"after {left / 1e9:.3f} GB" + (f"; allocator peak {_peak(args.device) / 1e9:.3f} GB" if cuda else ""))
    for line, size in live.peak.top(12):
        print(f"  {size / 1e6:10.1f} MB  {line}")


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def child(args) -> None:
    torch.set_num_threads(args.threads)
    print(RESULT + json.dumps(run_side(args.child, args)), flush=True)


def run_llmc(args) -> dict:
    """llm-compressor's side in a subprocess of its own environment."""
    env = dict(os.environ)
    python = args.llmc_python or sys.executable
    if args.llmc_site:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (args.llmc_site, env.get("PYTHONPATH")) if p)
    command = [python, str(Path(__file__).resolve()), "--child", "llmc", "--device", args.device, "--shape",
               args.shape, "--samples", str(args.samples), "--seq-len", str(args.seq_len), "--seed", str(args.seed),
               "--threads", str(args.threads)] + (["--checksum"] if args.checksum else [])
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT)]
    if proc.returncode or not lines:
        print(proc.stdout[-4000:], proc.stderr[-6000:], sep="\n")
        raise SystemExit(f"llm-compressor's run failed (exit {proc.returncode}); its output is above.")
    return json.loads(lines[-1][len(RESULT):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--shape", choices=sorted(SHAPES), default=None, help="1b on CUDA, small on the CPU")
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--llmc-python", default=None, help="python of an environment with llm-compressor")
    parser.add_argument("--llmc-site", default=None, help="folder with llm-compressor's packages (pip --target)")
    parser.add_argument("--torch-loop", action="store_true", help="also run slimkit with the fused sweep off")
    parser.add_argument("--checksum", action="store_true", help="print both sides' weight checksums (slower)")
    parser.add_argument("--live-bytes", action="store_true", help="slimkit alone: peak live tensor bytes, by line")
    parser.add_argument("--layers", type=int, default=None, help="with --live-bytes: the model's first N blocks")
    parser.add_argument("--child", choices=["llmc", "slimkit"], default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.shape = args.shape or ("1b" if args.device == "cuda" else "small")
    if args.child:
        child(args)
        return
    if args.live_bytes:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        torch.set_num_threads(args.threads)
        live_bytes(args)
        return
    if not (args.llmc_python or args.llmc_site):
        parser.error("name llm-compressor's environment: --llmc-python PATH or --llmc-site DIR")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common import machine_line, print_table

    torch.set_num_threads(args.threads)
    print(machine_line(args.threads))
    if args.device == "cuda":
        print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.version.cuda and 'CUDA ' + torch.version.cuda}")
    print(f"job: {args.shape} Llama shape, {args.samples} x {args.seq_len} tokens, W4 g128 sym, static act order, "
          f"damp 0.01, blocks of 128, no clip search, batch 1, device {args.device}", flush=True)
    results = [run_llmc(args)]
    print(f"llm-compressor {results[0]['version']}: {results[0]['seconds']:.1f} s", flush=True)
    results.append(run_side("slimkit", args))
    if args.torch_loop:
        os.environ["SLIMKIT_GPTQ_TRITON"] = "0"
        loop = run_side("slimkit", args)
        loop["side"] = "slimkit (torch loop)"
        results.append(loop)
    unit = "GPU peak" if args.device == "cuda" else "peak RSS"
    print_table(["side", "seconds", f"{unit} GB", "logit rel. RMS err", "torch", "transformers"],
                [[r["side"] if r["side"] != "llmc" else f"llm-compressor {r['version']}", f"{r['seconds']:.1f}",
                  f"{r['peak'] / 1e9:.2f}", f"{r['logit_rel_rms']:.4f}", r["torch"], r["transformers"]]
                 for r in results])
    base = results[0]
    for r in results[1:]:
        print(f"{r['side']}: time {r['seconds'] / base['seconds']:.2f}x llm-compressor's "
              f"({base['seconds'] / r['seconds']:.2f}x faster), memory {r['peak'] / base['peak']:.2f}x; "
              f"fused sweep {r.get('fused_sweep')}, custom ops registered during the call: "
              f"{r.get('custom_ops_registered')} {r.get('custom_ops')}")
    if args.checksum:
        print("weight checksums:", {r["side"]: r["weights_checksum"] for r in results})


if __name__ == "__main__":
    main()
