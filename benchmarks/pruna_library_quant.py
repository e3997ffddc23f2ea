"""Pruna's library quantizers (torchao, quanto) against slimkit's own int8 / rtn, and token_merging, in one run.

    .venv/bin/python benchmarks/pruna_library_quant.py [--threads 2] [--repeats 10] [--skip-minilm]
        [--skip-smollm2] [--skip-vit] [--kquants]

MiniLM-L6 (the zoo's padded sentence batch): fp32; ``torchao`` int8dq / int8wo / int4wo (group 128); ``quanto``
qint8 / qint4 weights; slimkit ``int8_dynamic`` (fbgemm, per-channel weights; activations per token, and per tensor
as torch.ao's own) and ``rtn`` 4-bit (group 128, packed).
Median latency (the arms timed round-robin), speed-up vs fp32 and embedding cosine vs fp32 (mean / min).
SmolLM2-135M (one 256-token sequence per forward): the same arms with group 64 for the 4-bit ones (the 576-wide
rows take no group of 128) and perplexity on PyDocText's test split (4 x 256 tokens). ViT-Base/16 from a
``ViTConfig`` (random weights, 224 px, batch 8): ``token_merging`` at r = 8 and 16 vs the unmerged model, latency
and logit cosine. ``--kquants``: SmolLM2-135M through ``llama_cpp`` with Pruna's ``quantization_method`` (llama.cpp's
quantizer: q4_k_m, q5_k_m, q6_k, q8_0) against slimkit's own GGUF writer (rtn 4-bit group 32 -> Q4_1 with a Q8_0
embedding; Q8_0): file size, the tensor types each file holds, and perplexity of the GGUF's weights read back by
transformers (dequantized, PyDocText test 4 x 256 tokens). Every number of a table comes from the same run; the
machine line names the CPU and date.
"""

from __future__ import annotations

import argparse
import collections
import copy
import logging
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_samples, machine_line, print_table  # noqa: E402

from slimkit import SmashConfig, smash, zoo  # noqa: E402
from slimkit.data import pydoc_text_blocks  # noqa: E402
from slimkit.evaluation import fidelity, perplexity  # noqa: E402

warnings.simplefilter("ignore")
logging.disable(logging.WARNING)

#: arm label -> (algorithm, un-prefixed hyperparameters); ``{group}`` is replaced per model
ARMS: dict[str, tuple[str, dict]] = {
    "torchao int8dq": ("torchao", {"quant_type": "int8dq"}),
    "torchao int8wo": ("torchao", {"quant_type": "int8wo"}),
    "torchao int4wo": ("torchao", {"quant_type": "int4wo", "group_size": "{group}"}),
    "quanto qint8": ("quanto", {"weight_bits": "qint8"}),
    "quanto qint4": ("quanto", {"weight_bits": "qint4"}),
    "slimkit int8_dynamic": ("int8_dynamic", {}),  # per-token activation scales (the default)
    "slimkit int8_dynamic per-tensor": ("int8_dynamic", {"activation_scales": "per_tensor"}),  # torch.ao's
    "slimkit rtn 4-bit": ("rtn", {"bits": 4, "group_size": "{group}"}),
}


def _smash(model: torch.nn.Module, algorithm: str, hps: dict, group: int) -> tuple[torch.nn.Module, float]:
    cfg = SmashConfig(device="cpu")
    cfg.activate(algorithm)
    for key, value in hps.items():
        cfg[f"{algorithm}_{key}"] = group if value == "{group}" else value
    start = time.perf_counter()
    smashed = smash(copy.deepcopy(model), cfg, verbose=False)
    return smashed, time.perf_counter() - start


def _call(model: torch.nn.Module, inputs):
    return (lambda: model(**inputs)) if isinstance(inputs, dict) else (lambda: model(inputs))


def _latencies(models: dict, inputs, args) -> dict[str, float]:
    samples = interleaved_samples({k: _call(m, inputs) for k, m in models.items()}, args.repeats, 2, args.threads)
    return {k: statistics.median(v) for k, v in samples.items()}


def _quant_rows(base: torch.nn.Module, inputs, group: int, args, quality) -> list[list[str]]:
    """One row per arm: latency, speed-up, the quality columns ``quality(model)`` gives, smash seconds."""
    models, smash_s, failed = {"fp32": base}, {"fp32": 0.0}, {}
    for label, (algorithm, hps) in ARMS.items():
        try:
            models[label], smash_s[label] = _smash(base, algorithm, hps, group)
        except Exception as exc:  # a library that cannot take this model: say so in the table
            failed[label] = f"{type(exc).__name__}: {str(exc)[:60]}"
    latency = _latencies(models, inputs, args)
    rows = []
    for label, model in models.items():
        rows.append([label, f"{latency[label]:.1f}", f"{latency['fp32'] / latency[label]:.2f}x", *quality(model),
                     f"{smash_s[label]:.1f}"])
    rows += [[label, "-", "-", reason, "", ""] for label, reason in failed.items()]
    return rows


def minilm(args) -> None:
    loaded = zoo.load("minilm")
    base, inputs = loaded.model.eval(), loaded.example_inputs

    def quality(model):
        fid = fidelity(base, model, inputs)
        return [f"{fid.cosine_mean:.5f}", f"{fid.cosine_min:.5f}"]

    rows = _quant_rows(base, inputs, 128, args, quality)
    print(f"\nMiniLM-L6, batch {tuple(inputs['input_ids'].shape)}")
    print_table(["arm", "ms", "speed-up", "cosine mean", "cosine min", "smash s"], rows)


def smollm2(args) -> None:
    loaded = zoo.load("smollm2-135m")
    base = loaded.model.eval()
    held_out = pydoc_text_blocks(loaded.tokenizer, 4, 256)
    inputs = {"input_ids": held_out[:1]}

    def quality(model):
        return [f"{perplexity(model, held_out):.3f}", ""]

    rows = _quant_rows(base, inputs, 64, args, quality)
    print("\nSmolLM2-135M, one 256-token forward; perplexity on PyDocText test (4 x 256 tokens)")
    print_table(["arm", "ms", "speed-up", "perplexity", "", "smash s"], rows)


def vit(args) -> None:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    base = ViTForImageClassification(ViTConfig(image_size=224, patch_size=16, num_labels=1000)).eval()
    inputs = {"pixel_values": torch.randn(8, 3, 224, 224)}
    models = {"ViT-B/16": base}
    for r in (8, 16):
        models[f"token_merging r={r}"], _ = _smash(base, "token_merging", {"r": r}, 0)
    latency = _latencies(models, inputs, args)
    rows = []
    for label, model in models.items():
        fid = fidelity(base, model, inputs)
        rows.append([label, f"{latency[label]:.0f}", f"{latency['ViT-B/16'] / latency[label]:.2f}x",
                     f"{fid.cosine_mean:.4f}"])
    print("\nViT-Base/16 from ViTConfig (random weights), batch 8 x 224 px, 197 tokens")
    print_table(["model", "ms", "speed-up", "logit cosine"], rows)


#: label -> (algorithms, prefixed hyperparameters) of the GGUF files compared
GGUF_ARMS: dict[str, tuple[list[str], dict]] = {
    "slimkit rtn g32 -> Q4_1": (["rtn", "llama_cpp"], {"rtn_bits": 4, "rtn_group_size": 32, "llama_cpp_dtype": "q8_0"}),
    "slimkit dtype=q8_0": (["llama_cpp"], {"llama_cpp_dtype": "q8_0"}),
    **{f"llama.cpp {m}": (["llama_cpp"], {"llama_cpp_quantization_method": m})
       for m in ("q4_k_m", "q5_k_m", "q6_k", "q8_0")},
}


def kquants(args) -> None:
    import gguf
    from transformers import LlamaForCausalLM

    loaded = zoo.load("smollm2-135m")
    base = loaded.model.eval()
    held_out = pydoc_text_blocks(loaded.tokenizer, 4, 256)
    rows = [["fp32 (torch)", f"{sum(p.numel() * 4 for p in base.parameters()) / 1e6:.1f}", "F32",
             f"{perplexity(base, held_out):.3f}", ""]]
    for label, (algorithms, hps) in GGUF_ARMS.items():
        cfg = SmashConfig(algorithms, device="cpu")
        for key, value in hps.items():
            cfg[key] = value
        cfg.add_tokenizer(loaded.tokenizer)
        start = time.perf_counter()
        smashed = smash(copy.deepcopy(base), cfg, verbose=False)
        seconds = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as folder:
            smashed.save_pretrained(folder)
            path = Path(folder) / "model.gguf"
            counts = collections.Counter(t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors
                                         if len(t.shape) > 1)
            model = LlamaForCausalLM.from_pretrained(folder, gguf_file="model.gguf", dtype=torch.float32).eval()
            rows.append([label, f"{path.stat().st_size / 1e6:.1f}",
                         " ".join(f"{k}x{n}" for k, n in sorted(counts.items())),
                         f"{perplexity(model, held_out):.3f}", f"{seconds:.0f}"])
        del smashed, model
    print("\nSmolLM2-135M as GGUF: slimkit's writer vs llama.cpp's quantizer (matrices per type; perplexity of the "
          "file's weights read back by transformers)")
    print_table(["file", "MB", "matrix types", "perplexity", "smash s"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--skip-minilm", action="store_true")
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument("--skip-vit", action="store_true")
    parser.add_argument("--kquants", action="store_true", help="also compare llama.cpp's k-quants on SmolLM2")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_line(args.threads))
    if not args.skip_minilm:
        minilm(args)
    if not args.skip_smollm2:
        smollm2(args)
    if not args.skip_vit:
        vit(args)
    if args.kquants:
        kquants(args)


if __name__ == "__main__":
    main()
