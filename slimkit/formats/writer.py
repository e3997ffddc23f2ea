"""The writer interface: a model written piece by piece (embedding, each decoder block, head), then published.

A :class:`ModelWriter` stages each piece as soon as it is ready (``write``: atomic, and rewriting a piece gives
the same bytes, so a resumed run can redo one), assembles the output files in the staging folder (``finish``,
bounded memory: tensor by tensor), and publishes them with ``smash_config.json`` as the output folder in one
atomic step (``publish``) with a README.md model card. The streaming runner stages each piece through
:meth:`~ModelWriter.stage_piece`, which first records the piece's packed layers (their grids, for the card and
the layer lists of a resumed run); the in-memory export of a checkpoint format writes its pieces the same way.
Each :class:`~slimkit.formats.base.CheckpointFormat` that is written piece by piece opens its writer.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import torch
from torch import nn

from slimkit.core.io import atomic_directory, write_json_atomic
from slimkit.engines.quantization.experts import DOWN, FIRST
from slimkit.engines.quantization.lowbit.experts import PackedExperts
from slimkit.engines.quantization.lowbit.linear import SCALE_DTYPE, PackedLinear
from slimkit.formats.kinds import symmetric_grid

__all__ = ["RUN_FILE", "ModelWriter", "WriteContext", "copy_bytes", "grid_record", "packed_on_meta"]


#: The run record of a streamed output whose format has no ``smash_config.json`` (compressed-tensors, GPTQ).
RUN_FILE = "slimkit_stream.json"


@dataclass
class WriteContext:
    """What a writer may need beyond the tensors: the model skeleton (config, structure), tokenizer, options."""

    model: nn.Module
    tokenizer: Any = None
    #: the hyperparameter view of the algorithm that chose the format (e.g. llama_cpp's ``dtype``), or None
    options: Any = None
    #: the run's SmashConfig (the quantizer's hyperparameters, e.g. GPTQ's act_order for a checkpoint's config)
    config: Any = None
    #: the model's float dtype (what it is saved in)
    dtype: torch.dtype | None = None
    #: the model folder being streamed (its generation config, ...)
    source: Path | None = None
    #: builds the README.md model card from a smashed-model view and the format name (the engine's ``build_card``);
    #: None: no card
    card: Callable[[Any, str], str] | None = None


#: bytes copied at a time when staged pieces are assembled into a file
COPY_BYTES = 16 * 2**20


def copy_bytes(source: Any, out: Any, nbytes: int, digest: Any = None) -> None:
    """Copy ``nbytes`` from binary file ``source`` (at its position) to ``out`` in bounded chunks (and into ``digest``).

    A source that ends early is an OSError naming it: a staged piece was truncated.
    """
    buffer = memoryview(bytearray(min(nbytes, COPY_BYTES)))
    while nbytes:
        got = source.readinto(buffer[: min(nbytes, COPY_BYTES)])
        if not got:
            raise OSError(f"{getattr(source, 'name', 'a staged piece')} ends early: the staged piece is truncated.")
        out.write(buffer[:got])
        if digest is not None:
            digest.update(buffer[:got])
        nbytes -= got


def grid_record(layer: PackedLinear | PackedExperts) -> dict[str, Any]:
    """What the card and a resumed run need of a packed layer (or experts module): bits, symmetric grid, its spec."""
    return {"bits": layer.bits, "sym": symmetric_grid(layer), "experts": isinstance(layer, PackedExperts),
            "spec": layer.spec()}


def packed_on_meta(model: nn.Module, records: dict[str, dict]) -> None:
    """Put an empty meta-device PackedLinear where a recorded layer is still a Linear in the skeleton.

    A resumed run quantized only the blocks after its resume point in this process; the skeleton must show every
    packed layer for the float-layer lists and the model card, as the in-memory model does.
    """
    for name, record in records.items():
        old, spec = model.get_submodule(name), record["spec"]
        if record.get("experts"):
            if not isinstance(old, PackedExperts):
                with torch.device("meta"):  # from_spec makes real buffers for a meta skeleton: keep these on meta
                    model.set_submodule(name, PackedExperts.from_spec(spec, old.act_fn))
        elif not isinstance(old, PackedLinear):
            model.set_submodule(name, PackedLinear(spec["in_features"], spec["out_features"], spec["bits"],
                                                   spec["group_size"], bias=spec["bias"],
                                                   input_scale=spec["input_scale"], device="meta"))


class ModelWriter(ABC):
    """Writes a model piece by piece into ``stage`` and publishes the result (see the module doc)."""

    #: the name of the format written (an algorithm's ``stream_format``, a save's ``format=``)
    format: ClassVar[str]
    #: the suffixes of a staged piece's files, the one written last (the piece counts as written once it exists) last
    piece_suffixes: ClassVar[tuple[str, ...]] = (".safetensors",)

    def __init__(self, stage: Path, context: WriteContext) -> None:
        self.stage, self.context = Path(stage), context
        self.folder = self.stage / self.format
        self.folder.mkdir(parents=True, exist_ok=True)

    def stage_piece(self, key: str, prefix: str, module: nn.Module, tied: dict[str, str]) -> None:
        """Record the packed layers of piece ``key`` (for :meth:`card`), then stage it with :meth:`write`."""
        grids = {f"{prefix}.{n}" if prefix and n else (prefix or n): grid_record(m)
                 for n, m in module.named_modules() if isinstance(m, (PackedLinear, PackedExperts))}
        write_json_atomic(self._grids_file(key), grids)  # before the piece: a staged piece always has its record
        self.write(key, prefix, module, tied)

    def _grids_file(self, key: str) -> Path:
        folder = self.stage / "grids"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{key}.json"

    def grid_records(self) -> dict[str, dict]:
        """Packed layer name -> :func:`grid_record`, over every piece staged so far (this run and earlier ones)."""
        records: dict[str, dict] = {}
        for file in sorted((self.stage / "grids").glob("*.json")):
            records.update(json.loads(file.read_text()))
        return records

    def card(self, smash_config: Any, extra: dict[str, Any]) -> str | None:
        """The README.md model card, as the in-memory save writes it, from the skeleton and the staged grids.

        The skeleton's packed layers hold no tensors (meta device), so each gets a one-value stand-in for its
        zero points (the middle code when its grid is symmetric) for the card to read.
        """
        if self.context.card is None:
            return None
        model, records = self.context.model, self.grid_records()
        packed_on_meta(model, records)
        modules = dict(model.named_modules())
        for name, record in records.items():
            layer = modules.get(name)
            stand_in = torch.full((1, 1), (1 << (int(record["bits"]) - 1)) if record["sym"] else 0, dtype=SCALE_DTYPE)
            if isinstance(layer, PackedLinear):
                layer._buffers["zeros"] = stand_in
            elif isinstance(layer, PackedExperts):
                for which in (FIRST, DOWN):
                    layer._buffers[f"{layer.buffer_prefix(which)}_zeros"] = stand_in
        applied = list(extra.get("applied") or [])
        smashed = SimpleNamespace(model=model, base_spec=extra.get("base") or {}, applied=applied,
                                  algorithms=[a["name"] for a in applied], smash_config=smash_config)
        return self.context.card(smashed, self.format)

    @abstractmethod
    def write(self, key: str, prefix: str, module: nn.Module, tied: dict[str, str]) -> None:
        """Stage module ``module`` (at dotted ``prefix`` in the model) as piece ``key``, atomically.

        ``tied`` maps names of this piece (full dotted names) to the canonical tensor they are tied to, which
        another piece (written earlier) holds.
        """

    def piece_files(self, key: str) -> list[Path]:
        """The staged files of piece ``key``, one per :attr:`piece_suffixes`."""
        return [self.folder / f"{key}{suffix}" for suffix in self.piece_suffixes]

    def written(self, key: str) -> bool:
        """Whether piece ``key`` is staged completely (a resumed run skips it)."""
        return all(file.is_file() for file in self.piece_files(key))

    def piece_keys(self, order: list[str] | None = None) -> list[str]:
        """``order``, or else the keys of every piece staged completely, sorted."""
        return order if order is not None else sorted(p.stem for p in self.folder.glob(f"*{self.piece_suffixes[-1]}"))

    @abstractmethod
    def finish(self) -> dict[str, Any]:
        """Assemble the output files in the staging folder; return what the record needs (files, sizes, types)."""

    @abstractmethod
    def payload(self) -> dict[str, Any]:
        """Top-level fields of ``smash_config.json`` describing the weights (format, file, checksum...)."""

    @abstractmethod
    def outputs(self) -> list[Path]:
        """The assembled files that make up the output folder (besides ``smash_config.json``)."""

    def publish(self, output: Path, smash_config: Any, extra: dict[str, Any], card: str | None = None) -> None:
        """Move the assembled files, the record and the model card into ``output`` in one atomic step.

        An earlier save in ``output`` is replaced only once everything is in place (``atomic_directory``).
        ``card``: the README.md text (default: :meth:`card`).
        """
        card = card if card is not None else self.card(smash_config, extra)
        with atomic_directory(output, replace=True) as tmp:
            for file in self.outputs():
                os.replace(file, tmp / file.name)
            self.record(tmp, smash_config, extra)
            if card is not None:
                (tmp / "README.md").write_text(card)

    def record(self, folder: Path, smash_config: Any, extra: dict[str, Any]) -> None:
        """Write what the output folder says about itself: slimkit's ``smash_config.json`` by default."""
        smash_config.save_to_json(folder, extra={**extra, **self.payload()})
