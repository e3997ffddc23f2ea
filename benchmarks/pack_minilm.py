"""MiniLM alone: packed (padding-free) batches vs padded vs one sentence per forward, by pack size, same run.

    PYTHONPATH=. OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/pack_minilm.py [--sentences 160] [--repeats 3]

The zoo MiniLM (fp32, 2 torch threads, no HTTP) embeds the same PyDocText sentences (9-92 tokens) in batches of
``--batch`` (16 and 64 by default): one sentence per forward; padded as ``dynamic_batch`` pads (pack "off",
``max_padding`` 0.25); packed as it packs, with per-sentence attention (transformers' sdpa per sentence, the
default) and with one block-diagonal mask over the whole pack (what the eager attention gets), each at several
``max_pack_tokens``. Timed batch by batch, all arms in turn (order alternating), so load from other processes hits
all alike. Prints ms per sentence and the speed-up over one per forward; checks every packed embedding against the
sentence's own (cosine and max abs difference).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import job_seconds, machine_line, print_table  # noqa: E402
from serving import pydoc_sentences  # noqa: E402

from slimkit import zoo  # noqa: E402
from slimkit.engines.batching.packing import Packer  # noqa: E402
from slimkit.engines.batching.padding import collate, length_groups  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=160)
    parser.add_argument("--batch", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--pack-tokens", type=int, nargs="+", default=[128, 256, 512, 1024, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(2)
    loaded = zoo.load("minilm")
    model, tokenizer = loaded.model.eval(), loaded.tokenizer
    ids = tokenizer(pydoc_sentences(args.sentences))["input_ids"]
    calls = [((), {"input_ids": torch.tensor([x]), "attention_mask": torch.ones(1, len(x), dtype=torch.long)})
             for x in ids]
    packers = {f"packed, per-sentence attention, {n}": Packer(model, n) for n in args.pack_tokens}
    packers |= {f"packed, block-diagonal mask, {n}": Packer(model, n, segmented=False) for n in args.pack_tokens}
    with torch.inference_mode():
        alone = torch.cat([model(**kwargs) for _, kwargs in calls])
        worst = (1.0, 0.0)
        for packer in packers.values():
            got = torch.cat(packer.run([packer.segments(*call) for call in calls]))
            cos = float(torch.nn.functional.cosine_similarity(got, alone).min())
            worst = (min(worst[0], cos), max(worst[1], float((got - alone).abs().max())))
    print(f"MiniLM alone, {len(calls)} PyDocText sentences of {min(map(len, ids))}-{max(map(len, ids))} tokens (mean "
          f"{sum(map(len, ids)) / len(ids):.1f})\n{machine_line(2)}\npacked vs alone: min cosine {worst[0]:.7f}, max "
          f"abs diff {worst[1]:.2e}\n")
    for batch in args.batch:
        jobs: list[dict[str, Callable[[], object]]] = []
        for start in range(0, len(calls), batch):
            chunk = calls[start : start + batch]
            groups = [collate([chunk[i] for i in g], pad_token_id=0)[1]
                      for g in length_groups(chunk, [1] * len(chunk), 0.25)]
            job: dict[str, Callable[[], object]] = {
                "one per forward": lambda chunk=chunk: [model(**kwargs) for _, kwargs in chunk],
                "padded (max_padding 0.25)": lambda groups=groups: [model(**kwargs) for kwargs in groups]}
            for name, packer in packers.items():
                job[name] = lambda chunk=chunk, packer=packer: packer.run([packer.segments(*c) for c in chunk])
            jobs.append(job)
        seconds = job_seconds(jobs, args.repeats)
        ms = {name: 1000 * s / (args.repeats * len(calls)) for name, s in seconds.items()}
        print(f"batches of {batch}:")
        print_table(["arm (max_pack_tokens)", "ms/sentence", "speed-up"],
                    [[name, f"{v:.2f}", f"{ms['one per forward'] / v:.2f}x"] for name, v in ms.items()])
        print()


if __name__ == "__main__":
    main()
