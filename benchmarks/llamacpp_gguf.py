"""slimkit -> GGUF -> llama.cpp: speed and perplexity against transformers and the shipped GGUF, in one run.

    .venv/bin/python benchmarks/llamacpp_gguf.py [--threads 2] [--decode-tokens 32] [--repeats 3] [--train-steps 300]
        [--skip-smollm2] [--skip-tiny]

Part 1, SmolLM2-135M (zoo, offline): greedy decode speed (tokens/s, 32 new tokens after a 24-token prompt, all paths
timed round-robin) and perplexity (PyDocText test, 8 x 256 tokens) of
  - fp32 transformers,
  - slimkit gptq 4-bit group 32 (transformers + slimkit's packed C kernel),
  - llama.cpp on the GGUF the zoo ships (Q4_1 blocks, Q8_0 tied embedding),
  - slimkit gptq 4-bit group 32 -> llama_cpp (Q4_1 blocks written from GPTQ's codes, embedding as Q8_0: the same
    bits as the shipped file).
Targets: slimkit's llama.cpp path >= 0.9x the shipped GGUF's speed, and >= 5x slimkit's transformers 4-bit decode.

Part 2, a model whose weights are NOT on a 4-bit grid: a small Llama (byte tokenizer, 4 layers, hidden 128 by default)
trained here on the PyDocText training documents, then quantized to Q4_1 two ways at the same size: llama.cpp's own
round-to-nearest (``llama_model_quantize`` of the F32 file, every block tensor Q4_1, embedding kept F32) and slimkit
gptq (group 32) -> llama_cpp. Both files are run by llama.cpp; perplexity on the PyDocText test documents and
KL divergence from the F32 file's next-byte distributions (more sensitive than perplexity).
"""

from __future__ import annotations

import argparse
import ctypes
import math
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import gguf
import torch
import torch.nn.functional as F
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_samples, machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, smash, zoo  # noqa: E402
from slimkit.data import pydoc_text_blocks  # noqa: E402
from slimkit.engines.gguf import LlamaCppModule, export_gguf  # noqa: E402
from slimkit.engines.gguf.runtime import import_llama_cpp  # noqa: E402
from slimkit.evaluation import perplexity  # noqa: E402
from slimkit.training import fit  # noqa: E402
from slimkit.zoo import smollm2  # noqa: E402
from slimkit.zoo._hf import byte_tokenizer  # noqa: E402


def _quiet_smash(model, cfg):
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = smash(model, cfg, verbose=False)
    return out, time.perf_counter() - start


def gptq_config(tok, group_size: int = 32, samples: int = 32, seq_len: int = 512) -> SmashConfig:
    cfg = SmashConfig({"gptq": {"bits": 4, "group_size": group_size, "n_calibration_samples": samples,
                                "seq_len": seq_len}})
    cfg.add_tokenizer(tok)
    cfg.add_data("PyDocText")
    return cfg


def llama_cpp_config(tok, threads: int, dtype: str) -> SmashConfig:
    cfg = SmashConfig({"llama_cpp": {"n_threads": threads, "n_ctx": 512, "dtype": dtype}})
    cfg.add_tokenizer(tok)
    return cfg


def ok(flag: bool) -> str:
    return "MET" if flag else "NOT MET"


def smollm2_part(args) -> None:
    loaded = zoo.load("smollm2-135m")
    base, tok = loaded.model.eval(), loaded.tokenizer
    test_ids = pydoc_text_blocks(tok, 8, 256, split="test")
    prompt = test_ids[:1, :24]
    torch.set_num_threads(args.quant_threads)
    gptq, gptq_s = _quiet_smash(base, gptq_config(tok, samples=args.calibration_samples, seq_len=256))
    ours, export_s = _quiet_smash(gptq.model, llama_cpp_config(tok, args.threads, "q8_0"))
    shipped_path = smollm2.gguf_folder() / smollm2.GGUF_FILE
    shipped = LlamaCppModule(shipped_path, n_threads=args.threads, n_ctx=512)
    print(f"gptq 4-bit g32 ({args.calibration_samples} x 256 calibration tokens, {args.quant_threads} torch thread(s)) "
          f"in {gptq_s:.0f} s; GGUF export + llama.cpp load in {export_s:.1f} s", flush=True)

    paths = {"fp32 transformers": base, "slimkit gptq 4-bit (transformers + C kernel)": gptq,
             "llama.cpp, shipped GGUF (Q4_1 + Q8_0 embedding)": shipped,
             "slimkit gptq 4-bit -> llama_cpp (Q4_1 + Q8_0 embedding)": ours}
    sizes = {"fp32 transformers": sum(p.numel() * 4 for p in base.parameters()),
             "llama.cpp, shipped GGUF (Q4_1 + Q8_0 embedding)": shipped_path.stat().st_size,
             "slimkit gptq 4-bit -> llama_cpp (Q4_1 + Q8_0 embedding)": ours.applied[-1]["state"]["gguf_bytes"]}
    ppl = {name: float("nan") for name in paths}
    for name, model in paths.items() if not args.skip_perplexity else ():
        torch.set_num_threads(args.threads)
        ppl[name] = perplexity(model, test_ids)
        print(f"{name}: perplexity {ppl[name]:.2f}", flush=True)

    def decode(model):
        return lambda: model.generate(prompt, max_new_tokens=args.decode_tokens, min_new_tokens=args.decode_tokens,
                                      do_sample=False, pad_token_id=tok.eos_token_id)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = interleaved_samples({k: decode(m) for k, m in paths.items()}, repeats=args.repeats, warmup=1,
                                      threads=args.threads)
    tps = {k: args.decode_tokens / (statistics.median(v) / 1000) for k, v in samples.items()}
    best = {k: args.decode_tokens / (min(v) / 1000) for k, v in samples.items()}
    rows = [[k, f"{ppl[k]:.2f}", f"{sizes[k] / 1e6:.1f}" if k in sizes else "-", f"{tps[k]:.1f}",
             f"{best[k]:.1f}", f"{tps[k] / tps['fp32 transformers']:.2f}x"] for k in paths]
    print(f"\nSmolLM2-135M; {machine_line(args.threads)}; llama.cpp threads = {args.threads}")
    print(f"decode: greedy, {args.decode_tokens} new tokens after a 24-token prompt (prompt decode included), "
          f"median of {args.repeats} round-robin runs; perplexity: PyDocText test, 8 x 256 tokens")
    print_table(["path", "perplexity", "weights MB", "tok/s", "best tok/s", "vs fp32"], rows)
    ours_k, shipped_k = list(paths)[3], list(paths)[2]
    vs_shipped, vs_gptq = tps[ours_k] / tps[shipped_k], tps[ours_k] / tps[list(paths)[1]]
    print(f"target: slimkit llama.cpp path >= 0.9x the shipped GGUF's speed: {vs_shipped:.2f}x -> "
          f"{ok(vs_shipped >= 0.9)}")
    print(f"target: slimkit llama.cpp path >= 5x slimkit transformers 4-bit decode: {vs_gptq:.2f}x -> "
          f"{ok(vs_gptq >= 5)}")


def train_tiny(tok, steps: int, threads: int, hidden: int) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=hidden, intermediate_size=3 * hidden,
                                      num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                      tie_word_embeddings=True)
    model = transformers.LlamaForCausalLM(config)
    blocks = pydoc_text_blocks(tok, 16 * steps // 2, 128, split="calibration")
    batches = [{"input_ids": b, "labels": b} for b in blocks.split(16)]
    start = time.perf_counter()
    fit(model, batches, optimizer="adamw", lr=3e-3, steps=steps, seed=0, grad_clip=1.0, num_threads=threads,
        progress=False)
    print(f"trained the tiny Llama ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters) for "
          f"{steps} steps of 16 x 128 bytes in {time.perf_counter() - start:.0f} s", flush=True)
    return model.eval()


def llama_cpp_rtn_q4_1(source: Path, target: Path, threads: int) -> None:
    """llama.cpp's own quantizer: every 2-D block tensor to Q4_1 (``pure``), the embedding kept F32."""
    lib = import_llama_cpp()
    params = lib.llama_model_quantize_default_params()
    params.nthread, params.ftype, params.pure = threads, lib.LLAMA_FTYPE_MOSTLY_Q4_1, True
    params.token_embedding_type = params.output_tensor_type = lib.GGML_TYPE_F32
    code = lib.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    if code != 0:
        raise RuntimeError(f"llama_model_quantize failed with {code}")


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return torch.cat([model(ids[i : i + 1]).logits.float() for i in range(ids.shape[0])])


def _tensor_bytes(path: Path) -> int:
    return sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors)


def tiny_part(args) -> None:
    tok = byte_tokenizer()
    torch.set_num_threads(args.train_threads)
    model = train_tiny(tok, args.train_steps, args.train_threads, args.tiny_hidden)
    test_ids = pydoc_text_blocks(tok, 16, 256, split="test")
    with tempfile.TemporaryDirectory() as tmp:
        f32, rtn = Path(tmp) / "f32.gguf", Path(tmp) / "rtn_q4_1.gguf"
        export_gguf(model, f32, tok, dtype="f32")
        llama_cpp_rtn_q4_1(f32, rtn, args.threads)
        gptq, gptq_s = _quiet_smash(model, gptq_config(tok, samples=64, seq_len=256))
        ours, _ = _quiet_smash(gptq.model, llama_cpp_config(tok, args.threads, "f32"))
        runs = {"transformers fp32": model,
                "llama.cpp F32 GGUF": LlamaCppModule(f32, args.threads, 512),
                "llama.cpp RTN Q4_1 (llama_model_quantize)": LlamaCppModule(rtn, args.threads, 512),
                "slimkit gptq g32 -> llama_cpp Q4_1": ours}
        sizes = {"llama.cpp F32 GGUF": f32.stat().st_size, "llama.cpp RTN Q4_1 (llama_model_quantize)":
                 rtn.stat().st_size, "slimkit gptq g32 -> llama_cpp Q4_1": ours.applied[-1]["state"]["gguf_bytes"]}
        logits = {k: _logits(m, test_ids) for k, m in runs.items()}
        weights = {k: _tensor_bytes(p) for k, p in (("f32", f32), ("rtn", rtn), ("ours", Path(ours.model.gguf_path)))}
    targets = test_ids[:, 1:].reshape(-1)
    ppl = {k: math.exp(F.cross_entropy(v[:, :-1].reshape(-1, v.shape[-1]), targets).item()) for k, v in logits.items()}
    reference = F.log_softmax(logits["llama.cpp F32 GGUF"], -1)
    kl = {k: F.kl_div(F.log_softmax(v, -1), reference, log_target=True, reduction="none").sum(-1).mean().item()
          for k, v in logits.items()}
    print(f"\nTiny Llama trained here (4 layers, hidden {args.tiny_hidden}, byte tokenizer, {args.train_threads} torch "
          f"thread(s) for training and gptq, gptq in {gptq_s:.0f} s); {machine_line(args.threads)}")
    print("perplexity: PyDocText test documents, 16 x 256 bytes (disjoint from the training/calibration documents); "
          "KL: mean per-token KL(F32 file || model) of the next-byte distributions")
    print_table(["model", "perplexity", "vs fp32", "KL vs F32 file", "file MB"],
                [[k, f"{v:.3f}", f"{100 * (v / ppl['transformers fp32'] - 1):+.2f}%", f"{kl[k]:.5f}",
                  f"{sizes[k] / 1e6:.2f}" if k in sizes else "-"] for k, v in ppl.items()])
    keys = list(runs)
    same = weights["rtn"] == weights["ours"]
    print(f"equal tensor bytes (both Q4_1 in every block, F32 embedding): {same} ({weights['rtn']} vs "
          f"{weights['ours']} bytes; the files differ only in metadata)")
    better = ppl[keys[3]] < ppl[keys[2]] and kl[keys[3]] < kl[keys[2]]
    print(f"target: slimkit gptq Q4_1 better than llama.cpp RTN Q4_1 at the same size: perplexity {ppl[keys[3]]:.3f} "
          f"vs {ppl[keys[2]]:.3f}, KL {kl[keys[3]]:.5f} vs {kl[keys[2]]:.5f} ({kl[keys[2]] / kl[keys[3]]:.1f}x lower) "
          f"-> {ok(better and same)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--tiny-hidden", type=int, default=128, help="hidden size of the trained tiny Llama")
    parser.add_argument("--train-threads", type=int, default=1,
                        help="torch threads for training and gptq of the tiny model (1 is fastest on a busy box)")
    parser.add_argument("--quant-threads", type=int, default=1, help="torch threads for SmolLM2's gptq")
    parser.add_argument("--calibration-samples", type=int, default=16, help="SmolLM2 gptq: blocks of 256 tokens")
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument("--skip-tiny", action="store_true")
    parser.add_argument("--skip-perplexity", action="store_true", help="SmolLM2: time decoding only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not args.skip_tiny:
        tiny_part(args)
    if not args.skip_smollm2:
        smollm2_part(args)


if __name__ == "__main__":
    main()
