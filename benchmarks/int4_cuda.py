"""int4 (rtn 4-bit, group 128) PackedLinear against the bf16 nn.Linear with the same weights, on a CUDA GPU.

    .venv/bin/python benchmarks/int4_cuda.py [--rows 1 8 64 128] [--no-model]

Per layer shape (in x out: Llama-8B's MLP up/gate and down, and its attention projection) and row count it prints
the speed ratio bf16 time / int4 time (CUDA events around back-to-back eager calls, warm-up, median of repeats;
> 1 means int4 is faster), the same ratio with the calls replayed from a CUDA graph (kernel time without Python and
launch overhead), the path the dispatch chose, and the best time each family of candidates had when it was measured.
The last line is whole-model decode tokens/s of a 1B-shape Llama built from a config (random bf16 weights, greedy
HF ``generate``, eager) before and after ``quantize_model_rtn``. Needs a CUDA GPU; runs in about a minute on an H200.

``--cpu-overhead`` needs no GPU: the Python cost per call of PackedLinear's direct paths (what its forward runs for an
input shape the CUDA dispatch has seen), measured on the CPU with a tiny layer so that the op itself costs little:
the thread CPU time per call of ``layer(x)``, of ``nn.Linear`` (under ``no_grad``) with the same weight, and of the
bare op, interleaved repetitions, medians. The dispatch is fed fixed timings that pick the path under test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slimkit.engines.quantization.lowbit import (
    PackedLinear,
    int4_dispatch,
    quantize_model_rtn,
    quantize_rtn,
    triton_int4,
)
from slimkit.engines.quantization.lowbit.autotune import cuda_event_timer, row_bucket

SHAPES = ((4096, 14336), (14336, 4096), (4096, 4096))
LLAMA_1B = dict(hidden_size=2048, num_hidden_layers=16, intermediate_size=8192, num_attention_heads=32,
                num_key_value_heads=8, tie_word_embeddings=True, vocab_size=128256, rope_theta=500000.0)


def layers(in_f: int, out_f: int) -> tuple[PackedLinear, nn.Linear]:
    """A 4-bit rtn PackedLinear and the bf16 nn.Linear holding its dequantised weight (no bias, as in Llama)."""
    w = torch.randn(out_f, in_f, device="cuda") * 0.02
    q, s, z = quantize_rtn(w, 4, 128, False)
    packed = PackedLinear.from_quantized(q, s, z, 4, 128, None, dtype=torch.bfloat16)
    dense = nn.Linear(in_f, out_f, bias=False, device="cuda", dtype=torch.bfloat16)
    dense.weight.data.copy_(packed.dequantize(torch.bfloat16))
    return packed, dense


def eager_time(fn, repeats: int = 7) -> float:
    return cuda_event_timer("", fn, warmup=5, calls=20, repeats=repeats)


def graph_time(fn, calls: int = 20) -> float | None:
    """Seconds per call replaying ``calls`` calls captured in one CUDA graph, or None if capture fails."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except RuntimeError as exc:
        print(f"    (CUDA graph capture failed: {exc})".splitlines()[0])
        return None
    return cuda_event_timer("", graph.replay, warmup=2, calls=5, repeats=7) / calls


def best_per_family(timings: dict[str, float]) -> str:
    best: dict[str, float] = {}
    for name, t in timings.items():
        fam = int4_dispatch.family(name)
        best[fam] = min(best.get(fam, float("inf")), t)
    return " ".join(f"{fam} {t * 1e6:.1f}us" for fam, t in sorted(best.items(), key=lambda kv: kv[1]))


@torch.no_grad()
def cell(packed: PackedLinear, dense: nn.Linear, rows: int) -> tuple[str, float, float, float, float | None, str]:
    """One table row for ``rows`` input rows: path, first-use s, bf16 and int4 s/call, graphed ratio, timings."""
    x = torch.randn(rows, packed.in_features, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    start = time.perf_counter()
    packed(x)  # first use: builds and measures every candidate for this shape and bucket
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    t_dense, t_int4 = [], []
    for _ in range(3):  # interleaved, so clock drift hits both alike
        t_dense.append(eager_time(lambda: dense(x), repeats=3))
        t_int4.append(eager_time(lambda: packed(x), repeats=3))
    gd, gi = graph_time(lambda: dense(x)), graph_time(lambda: packed(x))
    bucket = row_bucket(rows)
    name = packed.kernel_cache["plans"][(bucket, torch.bfloat16, x.get_device())][0]
    measured = int4_dispatch.CHOOSER.timings.get(int4_dispatch.decision_key(packed, torch.bfloat16, bucket), {})
    return (name, first, statistics.median(t_dense), statistics.median(t_int4), gd / gi if gd and gi else None,
            best_per_family(measured))


def layer_table(rows_list: list[int]) -> list[float]:
    print("| in x out | rows | bf16 us | int4 us | int4/bf16 speed | graphed speed | path chosen | measured at "
          "first use (best per family) | first use s |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for in_f, out_f in SHAPES:
        packed, dense = layers(in_f, out_f)
        for rows in rows_list:
            name, first, td, ti, graphed, measured = cell(packed, dense, rows)
            ratios.append(td / ti)
            shown = "n/a" if graphed is None else f"{graphed:.2f}x"
            print(f"| {in_f} x {out_f} | {rows} | {td * 1e6:.1f} | {ti * 1e6:.1f} | **{td / ti:.2f}x** | {shown} "
                  f"| {name} | {measured} | {first:.1f} |", flush=True)
        del packed, dense
        torch.cuda.empty_cache()
    return ratios


def decode_tokens_per_s(model, prompt: torch.Tensor, new_tokens: int) -> float:
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    model.generate(prompt, **kwargs)  # warm-up (and, quantized, the first-use measurements)
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.generate(prompt, **kwargs)
    torch.cuda.synchronize()
    return new_tokens / (time.perf_counter() - start)


def model_line(new_tokens: int = 64) -> None:
    import transformers

    config = transformers.LlamaConfig(**LLAMA_1B)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    prompt = torch.randint(0, config.vocab_size, (1, 16), device="cuda")
    with torch.no_grad():
        bf16 = decode_tokens_per_s(model, prompt, new_tokens)
        start = time.perf_counter()
        quantize_model_rtn(model, bits=4, group_size=128)
        quant_s = time.perf_counter() - start
        int4 = decode_tokens_per_s(model, prompt, new_tokens)
    print(f"\n1B-shape Llama (random weights), HF generate greedy, eager, {new_tokens} new tokens after a 16-token "
          f"prompt: bf16 {bf16:.1f} tok/s, rtn 4-bit g128 {int4:.1f} tok/s ({int4 / bf16:.2f}x; rtn took "
          f"{quant_s:.1f} s)")


@torch.no_grad()
def cpu_overhead() -> None:
    """Per-call thread CPU time of PackedLinear's direct paths against nn.Linear and the bare op (module doc)."""
    from slimkit.engines.quantization.lowbit.autotune import Chooser

    torch.set_num_threads(1)
    print("| path | rows | PackedLinear us | nn.Linear us | bare op us | PackedLinear - nn.Linear us |")
    print("|---|---|---|---|---|---|")
    saved = int4_dispatch.CHOOSER
    try:
        for path, rows in (("dense", 1), ("dense", 64), ("tinygemm", 1)):
            int4_dispatch.CHOOSER = Chooser(lambda name, fn, path=path: 0.0 if name == path else 1.0)
            med = _overhead_row(rows)
            print(f"| {path} | {rows} | {med['packed']:.2f} | {med['nn.Linear']:.2f} | {med['bare']:.2f} | "
                  f"{med['packed'] - med['nn.Linear']:+.2f} |", flush=True)
    finally:
        int4_dispatch.CHOOSER = saved


def _overhead_row(rows: int, k: int = 128, n: int = 16, calls: int = 2000, repeats: int = 15) -> dict[str, float]:
    q, s, z = quantize_rtn(torch.randn(n, k) * 0.02, 4, 128, False)
    packed = PackedLinear.from_quantized(q, s, z, 4, 128, None, dtype=torch.float32)
    x = torch.randn(1, rows, k)
    int4_dispatch.matmul(packed, x)  # what the layer's CUDA branch runs on its first call of this shape
    weight, _ = packed.direct_calls()[(x.shape, x.dtype)]
    dense = nn.Linear(k, n, bias=False)
    dense.weight.copy_(packed.dequantize(torch.float32))
    flat = x.view(rows, k)
    kernel = packed.kernel_cache.get(("tinygemm", torch.float32))
    bare = (lambda: torch.nn.functional.linear(x, weight)) if weight is not None else (lambda: kernel(flat))
    fns = {"packed": lambda: packed(x), "nn.Linear": lambda: dense(x), "bare": bare}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):  # interleaved: load on a shared host hits every candidate alike
        for name, fn in fns.items():
            start = time.thread_time()
            for _ in range(calls):
                fn()
            times[name].append((time.thread_time() - start) / calls * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 64, 128])
    parser.add_argument("--no-model", action="store_true", help="skip the whole-model decode line")
    parser.add_argument("--cpu-overhead", action="store_true", help="no GPU: Python cost of the direct paths")
    args = parser.parse_args()
    if args.cpu_overhead:
        cpu_overhead()
        return
    if not torch.cuda.is_available():
        sys.exit("benchmarks/int4_cuda.py needs a CUDA GPU (torch.cuda.is_available() is False here); nothing run.")
    start = time.perf_counter()
    kernels = f"triton {triton_int4.triton.__version__}" if triton_int4.AVAILABLE else "NO triton: Triton paths off"
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {kernels}\n")
    ratios = layer_table(args.rows)
    print(f"\nworst cell {min(ratios):.2f}x; 1-row cells {', '.join(f'{r:.2f}x' for r in ratios[::len(args.rows)])}"
          if args.rows[0] == 1 else f"\nworst cell {min(ratios):.2f}x")
    if not args.no_model:
        model_line()
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
