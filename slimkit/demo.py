"""The main job behind `slimkit smash`: smash a zoo model, measure it against the original, save, reload, verify."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from slimkit.config.smash_config import SmashConfig
from slimkit.core.coverage import coverage_summary
from slimkit.engine import SmashedModel
from slimkit.engine.interop import foreign_format, import_checkpoint
from slimkit.engine.model_card import measurement_record
from slimkit.engine.prepare import Prepared, parse_dtype, prepare
from slimkit.engine.smash import smash_prepared
from slimkit.engine.stream import run_folder
from slimkit.engine.stream.memory import format_bytes
from slimkit.errors import ConfigError
from slimkit.utils import main_tensor, model_device, move_inputs, run_model
from slimkit.zoo import DEFAULT_MODEL, ZooModel
from slimkit.zoo.sources import has_tokenizer

#: Default recipe per model: what `slimkit smash` applies when no algorithm is named.
DEFAULT_RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    "minilm": {"int8_dynamic": {"per_channel": True}},
    "smollm2-135m": {"int8_dynamic": {"per_channel": True, "exclude": ["lm_head"]}},
    "digits_cnn": {"level": {"sparsity": 0.5}},
    "mobilenet_v2": {"half": {"dtype": "bfloat16"}},
}


def retrieval_top1(model: Any, tokenizer: Any) -> float:
    """Fraction of the zoo's query sentences whose nearest passage (cosine) is their own match."""
    from slimkit.zoo import sentence_pairs

    pairs = sentence_pairs()
    queries = tokenizer([q for q, _ in pairs], padding=True, return_tensors="pt")
    passages = tokenizer([p for _, p in pairs], padding=True, return_tensors="pt")
    with torch.inference_mode():
        device = model_device(model)
        q = main_tensor(run_model(model, move_inputs(dict(queries), device))).float().cpu()
        p = main_tensor(run_model(model, move_inputs(dict(passages), device))).float().cpu()
    sims = torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(p, dim=-1).T
    return float((sims.argmax(dim=1) == torch.arange(len(pairs))).float().mean())


def _top1(model: Any, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return main_tensor(run_model(model, x.to(model_device(model)))).argmax(-1).cpu()


def _held_out_perplexity(model: Any, tokenizer: Any) -> float:
    from slimkit.data import pydoc_text_blocks
    from slimkit.evaluation import perplexity

    config = getattr(model, "config", None)
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 128
    return perplexity(model, pydoc_text_blocks(tokenizer, 4, min(128, int(limit)), split="test"))


def task_metrics(loaded: Any, base: Any, smashed: Any) -> dict[str, tuple[float, float, str]]:
    """Extra comparison rows that speak the model's task: retrieval, accuracy, perplexity, top-1 agreement."""
    if loaded.task == "sentence_embedding" and loaded.tokenizer is not None:
        return {"retrieval top-1 (16 pairs)": (retrieval_top1(base, loaded.tokenizer),
                                               retrieval_top1(smashed, loaded.tokenizer), "higher")}
    if loaded.name == "digits_cnn":
        from slimkit.zoo import digits_split

        _, _, x_test, y_test = digits_split()
        acc = [float((_top1(m, x_test) == y_test).float().mean()) for m in (base, smashed)]
        return {"test accuracy": (acc[0], acc[1], "higher")}
    if loaded.task == "causal_lm" and loaded.tokenizer is not None:
        label = "perplexity (held-out PyDocText, 4 blocks)"
        return {label: (_held_out_perplexity(base, loaded.tokenizer), _held_out_perplexity(smashed, loaded.tokenizer),
                        "lower")}
    if loaded.name == "mobilenet_v2":  # held-out photos: none of their crops is in Photos' train split
        from slimkit.data import DataModule

        photos = DataModule.from_string("Photos")
        held = torch.cat([x for loader in (photos.val_dataloader(batch_size=30), photos.test_dataloader(batch_size=30))
                          for x, _ in loader])
        agreement = float((_top1(base, held) == _top1(smashed, held)).float().mean())
        return {f"top-1 agreement with base ({len(held)} held-out photo crops)": (1.0, agreement, "higher")}
    return {}


#: new tokens each timed ``generate`` call makes when the smashed model only generates
GENERATE_TOKENS = 16


class GenerateCall(torch.nn.Module):
    """``model``'s greedy ``generate`` as a forward, for smashed models that only generate (``generate_only``).

    The output is the generated ids one-hot over ``vocab_size`` (ids padded with zero vectors to the prompt
    plus ``new_tokens``), so :func:`slimkit.evaluation.fidelity`'s per-row cosine is the share of positions
    whose tokens agree. ``save_pretrained`` is the model's own, so its size on disk is measured as saved.
    """

    def __init__(self, model: Any, new_tokens: int, vocab_size: int) -> None:
        super().__init__()
        self.model, self.new_tokens, self.vocab_size = model, int(new_tokens), int(vocab_size)

    def forward(self, **inputs: Any) -> torch.Tensor:
        """One-hot ``[batch, prompt + new_tokens, vocab_size]`` of the greedy generation's ids."""
        ids = self.model.generate(**inputs, max_new_tokens=self.new_tokens)
        prompt = inputs.get("input_ids")
        length = self.new_tokens + (prompt.shape[1] if isinstance(prompt, torch.Tensor) else 0)
        out = torch.zeros(ids.shape[0], max(length, ids.shape[1]), self.vocab_size)
        out[:, : ids.shape[1]].scatter_(-1, ids.cpu().clamp(0, self.vocab_size - 1)[..., None], 1.0)
        return out

    def save_pretrained(self, path: str | Path) -> None:
        """Save the wrapped model (what size on disk measures)."""
        self.model.save_pretrained(path)


def load_model(model_name: str, dtype: str | None = None) -> ZooModel:
    """The model ``--model`` names; another tool's compressed-tensors / GPTQ folder loads onto packed layers.

    ``dtype`` loads a Hugging Face folder in that dtype (default: as stored).
    """
    from slimkit.zoo._hf import random_tokens
    from slimkit.zoo.sources import load_source

    fmt = foreign_format(model_name)
    if fmt is None:
        return load_source(model_name, dtype=parse_dtype(dtype))
    model, cfg = import_checkpoint(model_name)[:2]
    print(f"slimkit: imported a {fmt} checkpoint onto packed layers (no re-quantization)", flush=True)
    vocab = int(model.config.vocab_size)
    causal = type(model).__name__.endswith("ForCausalLM")
    return ZooModel(model, {"input_ids": random_tokens(vocab, 2, 16, 0)}, str(model_name), tokenizer=cfg.tokenizer,
                    task="causal_lm" if causal else "",
                    data="PyDocText" if causal and cfg.tokenizer is not None else None, meta={"format": fmt})


def run(
    model_name: str = DEFAULT_MODEL,
    config: SmashConfig | None = None,
    output: str | Path | None = None,
    threads: int = 2,
    repeats: int = 10,
    warmup: int = 3,
    data: str | None = None,
    save_format: str = "slimkit",
    dtype: str | None = None,
    stream: bool | None = None,
    memory_budget: str | None = None,
    overwrite: bool = False,
) -> int:
    """Smash ``model_name``, print the before/after table, save, reload and check outputs. Returns an exit code.

    The recipe gets what its algorithms need from the zoo model (example inputs, tokenizer, and its own offline
    data when an algorithm trains or calibrates; ``data`` names another ``slimkit.data`` id). ``save_format``
    ``"compressed-tensors"`` or ``"gptq"`` saves a checkpoint other runtimes open; a recipe that format cannot
    hold is refused before anything runs. ``dtype`` loads a Hugging Face folder in that dtype (default: as stored).
    A model folder is streamed block by block (:func:`run_streaming`) when ``stream`` says so or it would not fit;
    :func:`slimkit.engine.prepare.prepare` decides, once, before anything is loaded.
    """
    from slimkit.evaluation import compare
    from slimkit.evaluation.report import applied_coverage

    folder = Path(str(model_name)).expanduser()
    folder = folder if folder.is_dir() and (folder / "config.json").is_file() else None
    if stream and (folder is None or config is None or output is None):
        raise ConfigError("--stream needs a local Hugging Face model folder (config.json + *.safetensors) as "
                          "--model, an --algorithm (e.g. gptq) and a save (drop --no-save).")
    if save_format != "slimkit" and config is None:
        raise ConfigError(f"--format {save_format} needs a low-bit recipe: add e.g. `--algorithm gptq`.")
    recipe = config if config is not None else SmashConfig(DEFAULT_RECIPES.get(model_name, {"int8_dynamic": {}}),
                                                           device="cpu")
    source = folder if folder is not None and foreign_format(folder) is None else None  # headers of a folder to smash
    prepared = prepare(source, recipe, output_format=save_format, stream=False if output is None else stream,
                       dtype=dtype, memory_budget=memory_budget,
                       data=data or ("PyDocText" if source and has_tokenizer(source) else None))  # as the zoo's
    if prepared.stream:
        return run_streaming(prepared, output, memory_budget=memory_budget, overwrite=overwrite)
    print(f"slimkit: loading model {model_name!r} (offline)", flush=True)
    loaded = load_model(model_name, dtype=dtype)
    if loaded.meta.get("format") and config is None:
        raise ConfigError(f"{model_name} is already quantized ({loaded.meta['format']}); name what to do with it, "
                          "e.g. `--algorithm llama_cpp` to compile it to GGUF.")
    if loaded.example_inputs is None:
        if recipe.example_inputs is None:
            raise ConfigError(f"{model_name} came without example inputs, which measuring needs; pass "
                              "--example-inputs FILE.safetensors or return (model, inputs) from the factory.")
        loaded.example_inputs = recipe.example_inputs
    base, inputs = loaded.model.eval(), loaded.example_inputs
    prepared = prepared.bind(base, defaults=loaded)  # what the zoo model brings; the model checked, before any work
    config = prepared.config
    if prepared.added:
        print(f"slimkit: added from the zoo model: {', '.join(prepared.added)}", flush=True)
    print(f"slimkit: recipe {config.get_active_algorithms()} {config.to_dict()['hyperparameters']}", flush=True)
    smashed = smash_prepared(base, prepared)
    base = base.to(model_device(smashed))  # time and score both on the device the smashed model runs on

    print(f"slimkit: measuring base vs smashed ({threads} threads, {repeats} repeats, median)", flush=True)
    if config["cacher"]:
        print(f"slimkit: note: {config['cacher']} answers a repeated input from memory, so both models are timed on "
              "a new input each call (token positions shuffled): the latency below is what a stream of new inputs "
              "sees; a repeated input returns from memory", flush=True)
    timed_base, timed_smashed = base, smashed
    reason = getattr(smashed, "generate_only", None)
    if reason:  # no forward to time or compare: both models' greedy generate instead
        vocab = int(base.config.vocab_size)
        timed_base, timed_smashed = (GenerateCall(m, GENERATE_TOKENS, vocab) for m in (base, smashed))
        print(f"slimkit: note: the smashed model only generates ({reason}): both models are timed on greedy "
              f"generate(max_new_tokens={GENERATE_TOKENS}) instead of forward, and fidelity compares the generated "
              "tokens (cosine of one-hot ids: the share of positions whose tokens agree)", flush=True)
    result = compare(timed_base, timed_smashed, inputs, threads=threads, warmup=warmup, repeats=repeats,
                     extra=task_metrics(loaded, base, smashed), fresh_inputs=bool(config["cacher"]),
                     coverage=applied_coverage(smashed))
    result.print()
    smashed.measurements = measurement_record(result, threads)

    if output is None:
        return 0
    out = Path(output)
    smashed.save_pretrained(out, format=save_format)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"slimkit: saved to {out} ({size / 1e6:.1f} MB: {', '.join(sorted(p.name for p in out.iterdir()))})")
    reloaded = SmashedModel.from_pretrained(out, trust_code=True)  # the user ran this model's code already
    if reason:
        reloaded = GenerateCall(reloaded, GENERATE_TOKENS, int(base.config.vocab_size))
    with torch.inference_mode():
        a = main_tensor(run_model(timed_smashed, inputs)).float().cpu()
        b = main_tensor(run_model(reloaded, inputs)).float().cpu()
    diff = float((a - b).abs().max())
    if torch.equal(a, b):
        print(f"slimkit: reloaded {out}: outputs identical to the smashed model (max |diff| = {diff:g})")
        return 0
    print(f"slimkit: RELOAD MISMATCH: reloaded outputs differ from the smashed model (max |diff| = {diff:g})")
    return 1


def run_streaming(prepared: Prepared, output: str | Path, memory_budget: str | None = None,
                  overwrite: bool = False) -> int:
    """`slimkit smash` streaming a folder: no before/after table (that needs both models in memory), its files."""
    result = run_folder(prepared, output, memory_budget=memory_budget, overwrite=overwrite)
    for name, record in result.coverage.items():
        for line in coverage_summary(record):
            print(f"slimkit: {name}: {line}", flush=True)
    files = ", ".join(sorted(p.name for p in Path(output).iterdir()))
    print(f"slimkit: saved to {output} ({format_bytes(result.output_bytes)}: {files}); blocks {result.blocks}"
          + (f" (resumed after block {result.resumed_at})" if result.resumed_at else "")
          + f"; peak RSS {format_bytes(result.peak_rss_bytes)}; "
          f"load it with SmashedModel.from_pretrained({str(output)!r})")
    return 0
