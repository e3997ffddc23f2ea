"""The streaming run: a model folder smashed one decoder block at a time into an output folder.

Order of work (see :mod:`slimkit.engine.stream` for the picture):

1. the pieces outside the blocks (embedding, final norm, ``lm_head``) are loaded one at a time, quantized when a
   target is among them, written, freed;
2. calibrated quantizers: the calibration ids run through the embedding up to block 0, whose call arguments are
   recorded (:class:`~.activations.SpillingStore`: in RAM up to a budget, the rest on disk);
3. each block is loaded from the shards (float32 compute on the CPU, the model dtype on CUDA), calibrated and
   quantized by the algorithm's step, run once more to turn its inputs into the next block's, cast to the model
   dtype, written, freed; ``run.json`` then records it (resume point);
4. the writer assembles the output files, the algorithms record their replay state, and the output folder
   appears in one atomic step; the staging folder ``<output>.partial`` is removed.
"""

from __future__ import annotations

import errno
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from slimkit.config.files import CONFIG_FILE
from slimkit.engine.base_model import describe_base
from slimkit.engine.model_card import build_card
from slimkit.engine.serialization import FORMAT_VERSION
from slimkit.engine.stream import memory
from slimkit.engine.stream.activations import SpillingStore
from slimkit.engine.stream.plan import Plan
from slimkit.engine.stream.resume import RunRecord
from slimkit.engines.quantization.lowbit.blockwise import release_caches
from slimkit.engines.quantization.lowbit.calibration import capture_block_inputs
from slimkit.errors import ConfigError, SaveLoadError
from slimkit.formats import RUN_FILE, ModelWriter, WriteContext, get_format

__all__ = ["StreamResult", "run_plan", "staging_folder"]


@dataclass
class StreamResult:
    """What a streaming run did."""

    output: Path
    format: str
    blocks: int
    #: blocks found finished in the staging folder when the run started (0 for a fresh run)
    resumed_at: int
    seconds: float
    peak_rss_bytes: int
    output_bytes: int
    #: calibration inputs kept in RAM and spilled to disk (bytes)
    inputs_ram_bytes: int = 0
    inputs_disk_bytes: int = 0
    #: False when the model was small enough to be smashed in memory instead
    streamed: bool = True
    #: what each weight quantizer quantized and left (``{algorithm: coverage record}``), as ``SmashedModel.coverage``
    coverage: dict[str, Any] = field(default_factory=dict)


def staging_folder(output: Path) -> Path:
    """Where a run into ``output`` keeps its pieces and progress until it publishes."""
    return output.parent / f"{output.name}.partial"


def _cast(module: nn.Module, source: torch.dtype, target: torch.dtype) -> None:
    """Cast every tensor of ``module`` that is in ``source`` (the compute dtype) to ``target`` (the model dtype).

    Tensors a module keeps in a dtype of its own (packed codes, float16 scales) are left as they are.
    """
    if source == target:
        return
    for m in module.modules():
        for store in (m._parameters, m._buffers):
            for key, t in store.items():
                if isinstance(t, torch.Tensor) and t.dtype == source:
                    cast = t.detach().to(target)
                    store[key] = nn.Parameter(cast, requires_grad=False) if isinstance(t, nn.Parameter) else cast


def _owner_name(model: nn.Module, module: nn.Module | None) -> str | None:
    return next((n for n, m in model.named_modules() if m is module), None) if module is not None else None


class _Run:
    def __init__(self, plan: Plan, output: Path, writer: ModelWriter, record: RunRecord, stage: Path,
                 activation_budget: int, progress: bool) -> None:
        self.plan, self.output, self.writer, self.record, self.stage = plan, output, writer, record, stage
        self.activation_budget, self.progress = activation_budget, progress
        self.model = plan.model
        self.store: SpillingStore | None = None
        self.pieces = plan.skeleton.pieces(plan.blocks)
        self.coverage: dict[str, Any] = {}

    def piece_key(self, index: int) -> str:
        return f"piece-{index:03d}"

    def block_key(self, index: int) -> str:
        return f"block-{index:05d}"

    def write_pieces(self) -> None:
        """Embedding, final norm, lm_head...: one at a time, quantized when they hold a target."""
        plan, skeleton = self.plan, self.plan.skeleton
        for i, prefix in enumerate(self.pieces):
            key = self.piece_key(i)
            if prefix in self.record.pieces and self.writer.written(key):
                continue
            inside = [t for t in plan.targets if t == prefix or t.startswith(prefix + ".")]
            skeleton.materialize(prefix, plan.compute_dtype if inside else plan.dtype, plan.device, via=plan.dtype)
            specs = plan.step.outside(self.model, inside) if inside else {}
            module = self.model.get_submodule(prefix)
            _cast(module, plan.compute_dtype, plan.dtype)
            module.to("cpu")
            tied = {n: skeleton.tied[n] for n in skeleton.names_under(prefix) if n in skeleton.tied and not inside}
            self.writer.stage_piece(key, prefix, module, tied)
            release_caches(module)
            skeleton.free(prefix)
            self.record.pieces.append(prefix)
            self.record.specs.update(specs)
            self.record.save(self.stage)
            memory.release()

    def capture(self) -> None:
        """Record block 0's call arguments on the calibration ids (spilled beyond the activation budget)."""
        plan, skeleton = self.plan, self.plan.skeleton
        step = plan.step
        embedding = self.model.get_input_embeddings()
        head = _owner_name(self.model, self.model.get_output_embeddings())
        embedding_name = _owner_name(self.model, embedding)
        loaded = [p for p in self.pieces if p != head]
        for prefix in loaded:  # the embedding stays in the model dtype; its output is cast (exact) by a hook
            skeleton.materialize(prefix, plan.dtype if prefix == embedding_name else plan.compute_dtype, "cpu",
                                 via=plan.dtype)
        hook = embedding.register_forward_hook(lambda _m, _a, out: out.to(plan.compute_dtype))
        try:
            ids = step.calibration_ids
            batches = [ids[i : i + step.batch_size] for i in range(0, ids.shape[0], step.batch_size)]
            with torch.no_grad():
                items = capture_block_inputs(self.model, plan.blocks.modules[0], batches)
        finally:
            hook.remove()
            for prefix in loaded:
                skeleton.free(prefix)
        self.store = SpillingStore(items, self.stage / "inputs", self.activation_budget, plan.device)
        if self.record.blocks_done:
            self.store.restore(int(self.record.inputs_parity))
        memory.release()

    def run_blocks(self) -> None:
        plan, skeleton, count = self.plan, self.plan.skeleton, len(self.plan.blocks.modules)
        bar = tqdm(total=count, initial=self.record.blocks_done, unit="block", disable=not self.progress,
                   desc=f"{plan.step.method} -> {plan.format}", dynamic_ncols=True)
        try:
            for index in range(self.record.blocks_done, count):
                prefix = plan.blocks.prefix(index)
                block = plan.blocks.modules[index]
                skeleton.materialize(prefix, plan.compute_dtype, plan.device, via=plan.dtype)
                names = [t for t in plan.targets if t.startswith(prefix + ".")]
                advance = plan.step.calibrated and index + 1 < count
                specs = plan.step(self.model, prefix, block, names, self.store, advance)
                _cast(block, plan.compute_dtype, plan.dtype)
                block.to("cpu")
                self.writer.stage_piece(self.block_key(index), prefix, block, {})
                parity = self.store.commit() if advance else self.record.inputs_parity
                self.record.blocks_done, self.record.inputs_parity = index + 1, parity
                self.record.specs.update(specs)
                self.record.save(self.stage)
                release_caches(block)
                skeleton.free(prefix)
                memory.release()
                bar.set_postfix_str(f"RSS {memory.format_bytes(memory.rss_bytes())}, "
                                    f"peak {memory.format_bytes(memory.peak_rss_bytes())}", refresh=False)
                bar.update(1)
        finally:
            bar.close()

    def publish(self, seconds: float, cpu_seconds: float) -> int:
        plan = self.plan
        order = [self.piece_key(i) for i in range(len(self.pieces))] + \
            [self.block_key(i) for i in range(len(plan.blocks.modules))]
        written = self.writer.finish(order)
        specs = {n: self.record.specs[n] for n in plan.targets if n in self.record.specs}
        summary: dict[str, Any] = {"specs": specs, "writer": written, "model": self.model,
                                   "targets": plan.model_targets}
        applied = []
        for i, (name, algo, view) in enumerate(plan.algorithms):
            algo.stream_finish(view, summary)
            share = 1.0 if i == plan.step_owner else 0.0  # the whole run is the quantizer's work
            applied.append({"name": name, "group": algo.group, "save_fn": algo.save_fn.value, "state": view.state,
                            "seconds": round(seconds * share, 3), "cpu_seconds": round(cpu_seconds * share, 3)})
            if isinstance(view.state.get("coverage"), dict):
                self.coverage[name] = view.state["coverage"]
        base = describe_base(self.model)
        base["dtype"] = str(plan.dtype).split(".")[-1]
        base.pop("packed", None)  # the layers this run packed are the quantizer's replay state, not the architecture
        extra: dict[str, Any] = {"format_version": FORMAT_VERSION, "applied": applied, "saved_before": None,
                                 "base": base, "stream": {"fingerprint": self.record.fingerprint}}
        if plan.format_owner is not None:
            extra["artifacts"] = plan.format_owner
        self.writer.publish(self.output, plan.config, extra)
        return int(written.get("bytes", 0))


def _check_output(output: Path, fingerprint: dict[str, Any], overwrite: bool) -> bool:
    """True when ``output`` already holds this very run's result; refuses to replace anything else silently."""
    if not output.exists():
        return False
    config = next((output / f for f in (CONFIG_FILE, RUN_FILE) if (output / f).is_file()), None)
    if not output.is_dir() or (any(output.iterdir()) and config is None):
        raise ConfigError(f"Refusing to write into {output}: it exists and is not an earlier slimkit save, so its "
                          "files would be lost. Choose a new or empty folder.")
    if config is None:
        return False
    try:
        done = json.loads(config.read_text()).get("stream", {}).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        done = None
    if done == fingerprint:
        return True
    if not overwrite:
        raise ConfigError(f"{output} already holds a saved model of another model or configuration. Choose another "
                          "output folder, or pass overwrite=True (--overwrite) to replace it (it is replaced only "
                          "once the new one is complete).")
    return False


def run_plan(plan: Plan, output: str | Path, activation_budget: int, progress: bool = True,
             overwrite: bool = False) -> StreamResult:
    """Execute ``plan`` into ``output`` (resuming an unfinished run of the same plan)."""
    start, cpu_start = time.perf_counter(), time.process_time()
    output = Path(output)
    fingerprint = plan.fingerprint()
    if _check_output(output, fingerprint, overwrite):
        return StreamResult(output, plan.format, len(plan.blocks.modules), len(plan.blocks.modules), 0.0,
                            memory.peak_rss_bytes(), sum(f.stat().st_size for f in output.iterdir() if f.is_file()))
    stage = staging_folder(output)
    record, resumed = RunRecord.open(stage, fingerprint)
    stage.mkdir(parents=True, exist_ok=True)
    if not resumed:
        record.save(stage)  # first: the staging folder says whose it is before anything else is in it
    resumed_at = record.blocks_done
    options = plan.algorithms[plan.format_owner][2] if plan.format_owner is not None else None
    writer = get_format(plan.format).writer(stage, WriteContext(plan.model, plan.config.tokenizer, options, plan.config,
                                                                plan.dtype, plan.checkpoint.folder, build_card))
    run = _Run(plan, output, writer, record, stage, activation_budget, progress)
    try:
        run.write_pieces()
        if plan.step.calibrated and record.blocks_done < len(plan.blocks.modules):
            run.capture()
        run.run_blocks()
        plan.step.finish()
        size = run.publish(time.perf_counter() - start, time.process_time() - cpu_start)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise SaveLoadError(
                f"The disk filled up while writing the smashed model ({exc}). Nothing was published: "
                f"{'the previous output at ' + str(output) + ' is intact' if output.exists() else 'no output exists'}"
                f", and the finished blocks are kept in {stage}. Free some space and run the same command again to "
                "continue from the last finished block.") from exc
        raise
    finally:
        if run.store is not None:
            run.store.close()
    store = run.store
    shutil.rmtree(stage, ignore_errors=True)
    return StreamResult(output, plan.format, len(plan.blocks.modules), resumed_at, time.perf_counter() - start,
                        memory.peak_rss_bytes(), size, store.ram_bytes if store else 0,
                        store.disk_bytes if store else 0, coverage=run.coverage)
