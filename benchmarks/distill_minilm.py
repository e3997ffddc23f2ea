"""MiniLM-L6 -> a 3-layer student by the ``layer_drop`` distiller, against the same 3 layers without distillation.

    PYTHONPATH=. .venv/bin/python benchmarks/distill_minilm.py [--keep 0 2 4] [--steps 400] [--lr 1e-4]
        [--batch-size 32] [--max-len 64] [--threads 2]

The teacher is the zoo's all-MiniLM-L6-v2 (6 BERT layers, mean-pooled L2-normalised embeddings). The student
keeps blocks ``--keep`` and is trained through ``smash`` with ``layer_drop``: MSE between each kept block's
output and the teacher block it replaces (``hidden_weight``) plus the cosine distance of the pooled embeddings
(``output_loss="cosine"``), on sentences of the PyDocText train split. The undistilled cut is the same blocks
copied out of the teacher with no training. Measured on the PyDocText *test* split's sentences (disjoint
documents):

* mean cosine between each model's embedding and the teacher's, per sentence;
* teacher-retrieval top-1: the student's embedding of a sentence is closest (among all test sentences'
  teacher embeddings) to the teacher's embedding of the same sentence;
* retrieval top-1 on the zoo's 16 (query, passage) pairs (the teacher gets 1.0);
* latency of a batch (interleaved timing; ratio to the teacher in the same run).
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_latency, machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, smash, zoo  # noqa: E402
from slimkit.algorithms.distillation._layers import keep_layers  # noqa: E402
from slimkit.data.builtin import load_pydoc_text_splits  # noqa: E402
from slimkit.data.utils import DictDataset  # noqa: E402
from slimkit.demo import retrieval_top1  # noqa: E402


def sentences(split: object, limit: int) -> list[str]:
    """Distinct prose sentences of 30-300 characters from a PyDocText split (code lines and tables dropped)."""
    seen: dict[str, None] = {}
    for item in split:  # type: ignore[attr-defined]
        for paragraph in item["text"].split("\n\n"):
            text = " ".join(paragraph.split())
            for sentence in re.split(r"(?<=[.!?])\s+", text):
                letters = sum(c.isalpha() or c == " " for c in sentence)
                if 30 <= len(sentence) <= 300 and letters > 0.85 * len(sentence) and sentence[0].isupper():
                    seen.setdefault(sentence, None)
    return list(seen)[:limit]


@torch.no_grad()
def embed(model: torch.nn.Module, tokenizer: object, texts: list[str], max_len: int) -> torch.Tensor:
    out = []
    for i in range(0, len(texts), 64):
        enc = tokenizer(texts[i:i + 64], padding=True, truncation=True, max_length=max_len,  # type: ignore[operator]
                        return_tensors="pt")
        out.append(model(**enc))
    return torch.cat(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=int, nargs="+", default=[0, 2, 4])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=64)
    parser.add_argument("--hidden-weight", type=float, default=1.0)
    parser.add_argument("--cosine-weight", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    loaded = zoo.load("minilm")
    teacher, tok = loaded.model.eval(), loaded.tokenizer
    train_split, val_split, test_split = load_pydoc_text_splits()
    train, val, test = (sentences(s, n) for s, n in ((train_split, 10**6), (val_split, 256), (test_split, args.n_test)))
    print(machine_line(args.threads))
    print(f"keep {args.keep}, {args.steps} steps x batch {args.batch_size} (max {args.max_len} tokens), lr {args.lr}, "
          f"hidden MSE weight {args.hidden_weight}, cosine weight {args.cosine_weight}; sentences: "
          f"{len(train)} train / {len(val)} val / {len(test)} test\n")

    def collate(items: list[dict]) -> dict:
        enc = tok([it["text"] for it in items], padding=True, truncation=True, max_length=args.max_len,
                  return_tensors="pt")
        return dict(enc)

    cfg = SmashConfig({"layer_drop": {"keep_layers": list(args.keep), "steps": args.steps, "epochs": 1000,
                                      "lr": args.lr, "batch_size": args.batch_size, "output_loss": "cosine",
                                      "hidden_weight": args.hidden_weight, "logits_weight": args.cosine_weight,
                                      "num_threads": args.threads}})
    cfg.add_data(tuple(DictDataset({"text": s}) for s in (train, val, test)), collate_fn=collate)
    start = time.perf_counter()
    smashed = smash(teacher, cfg, verbose=False)
    seconds = time.perf_counter() - start
    student = smashed.model.eval()
    cut = keep_layers(copy.deepcopy(teacher), "bert.encoder.layer", args.keep).eval()

    t_emb = embed(teacher, tok, test, args.max_len)
    rows = []
    batch = dict(tok(test[:32], padding="max_length", truncation=True, max_length=128, return_tensors="pt"))
    latency = interleaved_latency({"teacher": lambda: teacher(**batch), "student": lambda: student(**batch),
                                   "cut": lambda: cut(**batch)}, args.repeats, 2, args.threads)
    for name, model in (("teacher (6 layers)", teacher), (f"cut {args.keep}, no training", cut),
                        (f"layer_drop {args.keep}, distilled", student)):
        key = "teacher" if model is teacher else "student" if model is student else "cut"
        emb = embed(model, tok, test, args.max_len)
        cos = torch.nn.functional.cosine_similarity(emb, t_emb, dim=-1)
        own = ((emb @ t_emb.T).argmax(dim=1) == torch.arange(len(test))).float().mean()
        rows.append([name, f"{float(cos.mean()):.4f}", f"{float(cos.min()):.3f}", f"{float(own):.3f}",
                     f"{retrieval_top1(model, tok):.3f}", f"{latency[key]:.1f}",
                     f"{latency['teacher'] / latency[key]:.2f}x"])
    print_table(["model", "mean cos vs teacher", "min cos", "teacher-retrieval top-1", "16-pair top-1",
                 "ms/batch 32x128", "speedup"], rows)
    state = smashed.applied[0]["state"]
    print(f"\ndistillation: {state['train_steps']} steps in {seconds:.0f} s (smash wall time); val loss "
          f"{state.get('val_loss_before')} -> {state.get('val_loss_after')}; last parts {state['last_parts']}")


if __name__ == "__main__":
    main()
