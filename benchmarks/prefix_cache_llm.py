"""SmolLM2-135M with prefix_cache: a ~300-token shared prefix and 20 short questions, time to first token vs none.

    .venv/bin/python benchmarks/prefix_cache_llm.py [--prefix-tokens 300] [--new-tokens 16] [--threads 2]

The prompt of each question is the same context (the first ``--prefix-tokens`` tokens of a PyDocText test
document) followed by a short question. The plain zoo model and the same model smashed with ``prefix_cache`` answer
every question greedily, in alternating order per question (so machine noise hits both). Time to first token
comes from a transformers streamer (the moment the first new token is produced), total time from the
``generate`` call. The generated tokens must be identical (asserted). The cached model's first question is a miss
(it computes and stores the prefix); the figures include it, and the median over the other 19 is printed too.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers.generation.streamers import BaseStreamer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, smash, zoo  # noqa: E402
from slimkit.data.builtin import pydoc_token_stream  # noqa: E402

QUESTIONS = [
    "What is this text about?", "Name one keyword it mentions.", "Is this about Python?", "Summarise it in a line.",
    "What does the first sentence say?", "Who would read this?", "Give one example from it.", "Is it a tutorial?",
    "What is the main term defined?", "Does it mention classes?", "Does it mention functions?", "Is it formal?",
    "What comes after this text?", "List two nouns from it.", "What is its title?", "Is anything deprecated?",
    "Which version is it for?", "Does it show code?", "What should a beginner note?", "Rate its clarity.",
]


class FirstToken(BaseStreamer):
    """Records when ``generate`` hands over its first new token (the first ``put`` is the prompt)."""

    def __init__(self) -> None:
        self.calls, self.first = 0, None

    def put(self, value: torch.Tensor) -> None:
        self.calls += 1
        if self.calls == 2:
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


def answer(model: torch.nn.Module, ids: list[int], new_tokens: int) -> tuple[list[int], float, float]:
    """Greedy answer tokens, time to first token (s) and total time (s)."""
    prompt, streamer = torch.tensor([ids]), FirstToken()
    start = time.perf_counter()
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens, do_sample=False,
                         pad_token_id=0, streamer=streamer)
    total = time.perf_counter() - start
    return out[0, len(ids):].tolist(), streamer.first - start, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix-tokens", type=int, default=300)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = zoo.load("smollm2-135m")
    base, tokenizer = loaded.model.eval(), loaded.tokenizer
    context = pydoc_token_stream(tokenizer, "test")[: args.prefix_tokens]
    prefix = tokenizer("Read the context, then answer.\nContext: ", add_special_tokens=False)["input_ids"] + context
    prompts = [prefix + tokenizer(f"\nQuestion: {q}\nAnswer:", add_special_tokens=False)["input_ids"]
               for q in QUESTIONS]
    cached = smash(copy.deepcopy(base), SmashConfig({"prefix_cache": {}}, device="cpu"), verbose=False)
    with torch.inference_mode():
        answer(base, prompts[0][-20:], 2)  # warm-up on an unrelated short prompt (nothing stored that helps)
        results: dict[str, list[tuple[list[int], float, float]]] = {"no cache": [], "prefix_cache": []}
        for i, ids in enumerate(prompts):
            order = [("no cache", base), ("prefix_cache", cached)]
            for name, model in order if i % 2 == 0 else reversed(order):
                results[name].append(answer(model, ids, args.new_tokens))
            print(f"  question {i + 1}: TTFT " + ", ".join(f"{name} {runs[-1][1] * 1000:.0f} ms"
                                                       for name, runs in results.items()), flush=True)
    for (a, *_), (b, *_) in zip(results["no cache"], results["prefix_cache"], strict=True):
        assert a == b, f"outputs differ: {a} vs {b}"
    rows, med = [], {}
    for name, runs in results.items():
        ttft, total = [r[1] * 1000 for r in runs], [r[2] * 1000 for r in runs]
        med[name] = (statistics.mean(ttft), statistics.median(ttft[1:]), statistics.mean(total))
        rows.append([name, f"{med[name][0]:.0f}", f"{med[name][1]:.0f}", f"{med[name][2]:.0f}"])
    stats = cached.prefix_cache.stats()
    print(f"\nSmolLM2-135M, {len(prefix)}-token shared prefix + {len(prompts)} questions "
          f"({min(map(len, prompts))}-{max(map(len, prompts))} prompt tokens), greedy {args.new_tokens} new tokens\n"
          f"{machine_line(args.threads)}\n")
    print_table(["model", "TTFT mean (ms)", "TTFT median q2-20 (ms)", "total mean (ms)"], rows)
    base_m, cache_m = med["no cache"], med["prefix_cache"]
    print(f"\nprefix_cache: time to first token {base_m[0] / cache_m[0]:.2f}x faster (mean of all 20, first one a "
          f"miss), {base_m[1] / cache_m[1]:.2f}x (median of the 19 hits); total {base_m[2] / cache_m[2]:.2f}x faster; "
          f"outputs token-identical for all {len(prompts)} questions; cache {stats}")


if __name__ == "__main__":
    main()
