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

# module objects, not names: prepare reads model folders through this package (checkpoint, memory), so either
# side may be imported first
import slimkit.engine.prepare as preparation
import slimkit.engine.smash as smashing
from slimkit.config.smash_config import SmashConfig
from slimkit.engine.stream import memory
from slimkit.engine.stream.checkpoint import Checkpoint
from slimkit.engine.stream.plan import Plan, make_plan
from slimkit.engine.stream.runner import StreamResult, run_plan, staging_folder
from slimkit.errors import ConfigError
from slimkit.zoo.sources import load_source

__all__ = ["StreamResult", "estimate_in_memory_bytes", "should_stream", "smash_folder"]


def estimate_in_memory_bytes(folder: str | Path, dtype: str | torch.dtype | None = None) -> int:
    """Bytes an in-memory smash of ``folder`` would need: the weights in their dtype times a working factor."""
    return preparation.in_memory_bytes(Checkpoint(folder), preparation.parse_dtype(dtype))


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

    ``stream``: None streams when an in-memory smash would need more than ``memory_budget`` (default: half the
    available memory) and every algorithm can stream, True streams block by block, False loads the whole model and
    smashes it as :func:`slimkit.smash` does (:func:`slimkit.engine.prepare.prepare` decides, once). ``dtype`` is
    the model's dtype (default: the checkpoint's; bf16 and fp16 models are calibrated in float32 on the CPU and
    saved in their dtype). ``memory_budget`` ("6GB") bounds the streaming run: refused when one block does not fit,
    and what is left holds calibration inputs before they spill to disk (``activation_budget`` sets that share
    directly). A killed streaming run continues from its last finished block when called again with the same
    arguments; another model or config on the same ``output`` is refused (``overwrite=True`` replaces a finished
    save of another run). ``save_format`` ``"compressed-tensors"`` or ``"gptq"`` writes a checkpoint transformers
    and vLLM open (a recipe the format cannot hold is refused before anything is read). ``smash_config`` is not
    changed. The output loads with ``SmashedModel.from_pretrained(output)``.
    """
    prepared = preparation.prepare(Path(model_folder), smash_config, stream=stream, output_format=save_format,
                                   dtype=dtype, memory_budget=memory_budget)
    return run_folder(prepared, output, memory_budget=memory_budget, activation_budget=activation_budget,
                      progress=progress, overwrite=overwrite, verbose=verbose)


def run_folder(prepared: preparation.Prepared, output: str | Path, *, memory_budget: int | str | None = None,
               activation_budget: int | str | None = None, progress: bool = True, overwrite: bool = False,
               verbose: bool = True) -> StreamResult:
    """Run the :func:`~slimkit.engine.prepare.prepare` of a folder into ``output``: streamed or in memory."""
    if verbose:
        print(f"slimkit: {prepared.reason}", flush=True)
    if not prepared.stream:
        return _in_memory(prepared, Path(output), verbose)
    plan = make_plan(prepared)
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


def _in_memory(prepared: preparation.Prepared, output: Path, verbose: bool) -> StreamResult:
    """The whole model loaded (in its dtype), smashed in place, saved: for models that fit comfortably."""
    start, loaded = time.perf_counter(), load_source(prepared.checkpoint.folder, dtype=prepared.dtype)
    loaded.example_inputs = loaded.data = None  # its tokenizer only: a folder's smash adds no inputs or data
    smashed = smashing.smash_prepared(loaded.model, prepared.bind(loaded.model, defaults=loaded), copy_model=False,
                                      verbose=verbose)
    smashed.save_pretrained(output, format=prepared.output_format)
    size = sum(f.stat().st_size for f in output.rglob("*") if f.is_file())
    return StreamResult(output, prepared.output_format, 0, 0, time.perf_counter() - start, memory.peak_rss_bytes(),
                        size, streamed=False)
