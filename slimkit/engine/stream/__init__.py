"""Smash a model folder into an output folder, streaming it one decoder block at a time when it is large.

:func:`smash_folder` is the one call: a Hugging Face causal-LM folder (safetensors, one file or shards), a
SmashConfig with a block-wise quantizer (rtn, hqq, gptq, awq; optionally llama_cpp for a GGUF), an output folder.
Streamed, peak memory follows the largest block, not the model: the skeleton sits on the meta device, each block
is read from the shards, calibrated, quantized, written and freed; a killed run resumes from the last finished
block with the same command. Small models (or ``stream=False``) are smashed in memory instead.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from slimkit.config.smash_config import SmashConfig
from slimkit.engine.interop import check_model_recipe, check_recipe
from slimkit.engine.smash import smash
from slimkit.engine.stream import memory
from slimkit.engine.stream.checkpoint import Checkpoint
from slimkit.engine.stream.plan import Plan, make_plan, parse_dtype
from slimkit.engine.stream.runner import StreamResult, run_plan, staging_folder
from slimkit.errors import ConfigError

__all__ = ["StreamResult", "estimate_in_memory_bytes", "should_stream", "smash_folder"]

#: the in-memory path holds about this many times the model (its weights, a quantizer's working copies)
IN_MEMORY_FACTOR = 1.5


def estimate_in_memory_bytes(folder: str | Path, dtype: str | torch.dtype | None = None) -> int:
    """Bytes an in-memory smash of ``folder`` would need: the weights in their dtype times a working factor."""
    checkpoint = Checkpoint(folder)
    target = parse_dtype(dtype) or checkpoint.dtype()
    return int(IN_MEMORY_FACTOR * checkpoint.nbytes(checkpoint.tensors, target))


def should_stream(folder: str | Path, dtype: str | torch.dtype | None = None, available: int | None = None) -> bool:
    """Whether ``folder`` would not fit comfortably in memory (more than half of what is available)."""
    available = memory.available_bytes() if available is None else available
    return bool(available) and estimate_in_memory_bytes(folder, dtype) > available // 2


def _activation_budget(plan: Plan, memory_budget: int | str | None, activation_budget: int | str | None) -> int:
    rss = memory.rss_bytes()
    need = rss + plan.working_set()
    if memory_budget is not None:
        budget = memory.parse_bytes(memory_budget)
        if budget < need:
            raise ConfigError(
                f"The memory budget of {memory.format_bytes(budget)} is smaller than one decoder block needs: "
                f"{plan.describe_block()}, and this process already holds {memory.format_bytes(rss)}. Allow at least "
                f"{memory.format_bytes(need)} (memory_budget= / --memory-budget).")
        spare = budget - need
    else:
        spare = memory.available_bytes() // 4 or 2**30
    return memory.parse_bytes(activation_budget) if activation_budget is not None else spare


def smash_folder(
    model_folder: str | Path,
    smash_config: SmashConfig,
    output: str | Path,
    *,
    stream: bool | None = None,
    dtype: str | torch.dtype | None = None,
    memory_budget: int | str | None = None,
    activation_budget: int | str | None = None,
    progress: bool = True,
    overwrite: bool = False,
    verbose: bool = True,
    save_format: str = "slimkit",
) -> StreamResult:
    """Smash the model in ``model_folder`` with ``smash_config`` and save it to ``output``; return what was done.

    ``stream``: None decides by size (:func:`should_stream`), True streams block by block, False loads the whole
    model and runs :func:`slimkit.smash`. ``dtype`` is the model's dtype (default: the checkpoint's; bf16 and fp16
    models are calibrated in float32 on the CPU and saved in their dtype). ``memory_budget`` ("6GB") bounds the
    streaming run: refused when one block does not fit, and what is left holds calibration inputs before they
    spill to disk (``activation_budget`` sets that share directly). A killed streaming run continues from its last
    finished block when called again with the same arguments; another model or config on the same ``output`` is
    refused (``overwrite=True`` replaces a finished save of another run). ``save_format`` ``"compressed-tensors"``
    or ``"gptq"`` writes a checkpoint transformers and vLLM open (a recipe the format cannot hold is refused before
    anything is read). The output loads with ``SmashedModel.from_pretrained(output)``.
    """
    Checkpoint(model_folder)  # refuses pickle-only and broken folders before anything else
    if stream is None:
        stream = should_stream(model_folder, dtype)
    if not stream:
        return _in_memory(Path(model_folder), smash_config, Path(output), dtype, verbose, save_format)
    plan = make_plan(model_folder, smash_config, dtype, save_format)
    budget = _activation_budget(plan, memory_budget, activation_budget)
    if verbose:
        print(f"slimkit: streaming {plan.checkpoint.folder} ({len(plan.blocks.modules)} blocks; largest "
              f"{plan.describe_block()}; model dtype {str(plan.dtype).split('.')[-1]}, compute "
              f"{str(plan.compute_dtype).split('.')[-1]} on {plan.device}) -> {plan.format} format in {output}"
              + (f" (resuming {staging_folder(Path(output))})" if staging_folder(Path(output)).exists() else ""),
              flush=True)
    result = run_plan(plan, output, budget, progress=progress, overwrite=overwrite)
    if verbose:
        print(f"slimkit: wrote {output} ({memory.format_bytes(result.output_bytes)}) in {result.seconds:.1f} s, "
              f"peak RSS {memory.format_bytes(result.peak_rss_bytes)}", flush=True)
    return result


def _in_memory(folder: Path, smash_config: SmashConfig, output: Path, dtype: str | torch.dtype | None,
               verbose: bool, save_format: str = "slimkit") -> StreamResult:
    """The whole model loaded (in its dtype), smashed in place, saved: for models that fit comfortably."""
    import transformers  # heavy: imported when a model is really loaded

    start = time.perf_counter()
    config = transformers.AutoConfig.from_pretrained(str(folder))
    architecture = (getattr(config, "architectures", None) or [None])[0]
    cls = getattr(transformers, architecture or "", None)
    if cls is None:
        raise ConfigError(f"{folder}/config.json names architecture {architecture!r}, which this transformers does "
                          "not have; add 'architectures' to config.json.")
    model = cls.from_pretrained(str(folder), dtype=parse_dtype(dtype) or "auto", use_safetensors=True).eval()
    tokenizer_files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    if smash_config.tokenizer is None and any((folder / f).is_file() for f in tokenizer_files):
        smash_config.add_tokenizer(str(folder))
    if save_format != "slimkit":
        check_recipe(smash_config, save_format)
        check_model_recipe(model, smash_config, save_format)  # group size vs the model's widths, before quantizing
    smashed = smash(model, smash_config, copy_model=False, verbose=verbose)
    smashed.save_pretrained(output, format=save_format)
    size = sum(f.stat().st_size for f in output.rglob("*") if f.is_file())
    return StreamResult(output, save_format, 0, 0, time.perf_counter() - start, memory.peak_rss_bytes(), size,
                        streamed=False)
