"""SmolLM2-135M: c_generate (CTranslate2 int8) vs slimkit rtn 4-bit vs llama.cpp vs fp32, and kvpress at 0.25/0.5.

    .venv/bin/python benchmarks/ctranslate2_smollm2.py [--threads 2] [--new-tokens 64] [--repeats 3]
        [--skip-llamacpp] [--skip-kvpress]

llama.cpp: slimkit's ``llama_cpp`` compiler writing the GGUF, llama.cpp's quantizer making Q4_K_M from it
(``quantization_method="q4_k_m"``; matrices whose rows are not a multiple of 256 get llama.cpp's fallback type,
listed) and slimkit's own writer making every matrix Q8_0 (``dtype="q8_0"``); run by llama-cpp-python with the
same thread count (needs the ``llamacpp`` extra, ``make test-llamacpp`` builds it).

Generation: greedy, a 32-token PyDocText prompt continued by ``--new-tokens`` tokens (forced, no early stop), median
of ``--repeats`` runs, interleaved; tokens/s counts the new tokens over the whole ``generate`` call (prompt included).
Perplexity: PyDocText test split, 8 x 256 tokens, each model's own forward (CTranslate2's ``forward_batch``).
kvpress: 4 test blocks of 512 tokens; the first 384 are pre-filled under the press (the cache shrunk by the ratio),
then the last 128 are scored through that cache at their true positions: KV cache bytes after pre-filling and the
perplexity of those 128 tokens, against the uncompressed cache (ratio 0).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from transformers import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, smash, zoo  # noqa: E402
from slimkit.data import pydoc_text_blocks  # noqa: E402
from slimkit.evaluation import perplexity, size_on_disk  # noqa: E402

PRESSES = ("KnormPress", "ExpectedAttentionPress", "StreamingLLMPress")


def smashed(base, tok, config: dict):
    cfg = SmashConfig(config, device="cpu")
    cfg.add_tokenizer(tok)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return smash(base, cfg, verbose=False)


def tokens_per_second(models: dict, prompt: torch.Tensor, new: int, repeats: int) -> dict[str, float]:
    """Median new tokens/s of each model's greedy generate, the models interleaved run by run."""
    kwargs = {"max_new_tokens": new, "min_new_tokens": new, "do_sample": False,
              "attention_mask": torch.ones_like(prompt), "pad_token_id": 0}
    times: dict[str, list[float]] = {name: [] for name in models}
    with torch.inference_mode():
        for model in models.values():  # warm-up
            model.generate(prompt, **{**kwargs, "max_new_tokens": 4, "min_new_tokens": 4})
        for _ in range(repeats):
            for name, model in models.items():
                start = time.perf_counter()
                out = model.generate(prompt, **kwargs)
                times[name].append(time.perf_counter() - start)
                assert out.shape[1] == prompt.shape[1] + new, (name, out.shape)
    return {name: new / statistics.median(t) for name, t in times.items()}


def cache_bytes(cache) -> int:
    return sum(layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()
               for layer in cache.layers)


def pressed_quality(model, press, blocks: torch.Tensor, context: int) -> tuple[float, float]:
    """Mean KV-cache bytes after pre-filling ``context`` tokens (under ``press``), perplexity of the rest."""
    nll, count, sizes = 0.0, 0, []
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for block in blocks:
            ctx, rest = block[None, :context], block[None, context:]
            cache = DynamicCache()
            if press is None:
                model(ctx, past_key_values=cache, use_cache=True)
            else:
                with press(model):
                    model(ctx, past_key_values=cache, use_cache=True)
            sizes.append(cache_bytes(cache))
            positions = torch.arange(context, block.shape[0])[None]
            logits = model(rest, past_key_values=cache, use_cache=True, position_ids=positions).logits
            # the last context token's prediction is in the pre-fill; score rest[1:] from rest[:-1]
            losses = torch.nn.functional.cross_entropy(logits[0, :-1].float(), rest[0, 1:], reduction="sum")
            nll += float(losses)
            count += rest.shape[1] - 1
    return statistics.mean(sizes), float(torch.exp(torch.tensor(nll / count)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-llamacpp", action="store_true", help="leave out the two llama.cpp rows")
    parser.add_argument("--skip-kvpress", action="store_true", help="generation table only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    loaded = zoo.load("smollm2-135m")
    base, tok = loaded.model.eval(), loaded.tokenizer
    test_ids = pydoc_text_blocks(tok, 8, 256, split="test")
    models, seconds = {"fp32 (transformers)": base}, {"fp32 (transformers)": 0.0}
    llama = {"n_threads": args.threads, "n_ctx": 512}
    arms = [("slimkit rtn 4-bit g64", {"rtn": {"bits": 4, "group_size": 64}}),
            ("c_generate (CTranslate2 int8)", {"c_generate": {"weight_bits": 8}})]
    if not args.skip_llamacpp:
        arms += [("llama.cpp Q4_K_M (llama_cpp, q4_k_m)", {"llama_cpp": {**llama, "quantization_method": "q4_k_m"}}),
                 ("llama.cpp Q8_0 (llama_cpp, dtype q8_0)", {"llama_cpp": {**llama, "dtype": "q8_0"}})]
    for name, config in arms:
        start = time.perf_counter()
        models[name] = smashed(base, tok, config)
        seconds[name] = time.perf_counter() - start
        types = models[name].applied[-1]["state"].get("tensor_types")
        print(f"{name}: smashed in {seconds[name]:.1f} s" + (f"; GGUF tensor types {types}" if types else ""),
              flush=True)
    speed = tokens_per_second(models, test_ids[:1, :32], args.new_tokens, args.repeats)
    rows, fp32 = [], None
    for name, model in models.items():
        ppl = perplexity(model, test_ids)
        fp32 = fp32 or ppl
        size = size_on_disk(model) / 1e6
        rows.append([name, f"{ppl:.2f}", f"{100 * (ppl / fp32 - 1):+.1f}%", f"{speed[name]:.1f}",
                     f"{speed[name] / speed['fp32 (transformers)']:.2f}x", f"{size:.0f}", f"{seconds[name]:.1f}"])
        print(rows[-1], flush=True)
    print(f"\nSmolLM2-135M generation; {machine_line(args.threads)}")
    print(f"greedy, 32-token prompt + {args.new_tokens} new tokens, median of {args.repeats}; perplexity: PyDocText "
          "test, 8 x 256 tokens")
    print_table(["model", "perplexity", "vs fp32", "tokens/s", "vs fp32", "saved MB", "smash s"], rows)
    if args.skip_kvpress:
        return

    blocks = pydoc_text_blocks(tok, 4, 512, split="test")
    plain_bytes, plain_ppl = pressed_quality(base, None, blocks, 384)
    kv_rows = [["none (full cache)", "0", f"{plain_bytes / 1e6:.2f}", "1.00x", f"{plain_ppl:.2f}", "+0.0%"]]
    for press_type in PRESSES:
        for ratio in (0.25, 0.5):
            model = smashed(base, tok, {"kvpress": {"press_type": press_type, "compression_ratio": ratio}})
            size, ppl = pressed_quality(base, model.kv_press.press, blocks, 384)
            kv_rows.append([press_type, f"{ratio}", f"{size / 1e6:.2f}", f"{size / plain_bytes:.2f}x", f"{ppl:.2f}",
                            f"{100 * (ppl / plain_ppl - 1):+.1f}%"])
            print(kv_rows[-1], flush=True)
    print(f"\nSmolLM2-135M kvpress; {machine_line(args.threads)}")
    print("4 PyDocText test blocks: 384 tokens pre-filled under the press, the next 128 scored through its cache")
    print_table(["press", "compression_ratio", "KV cache MB", "vs full", "perplexity (next 128)", "vs full"], kv_rows)


if __name__ == "__main__":
    main()
