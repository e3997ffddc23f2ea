"""The writer interface: a model written piece by piece (embedding, each decoder block, head), then published.

A :class:`ModelWriter` stages each piece as soon as it is ready (``write``: atomic, and rewriting a piece gives
the same bytes, so a resumed run can redo one), assembles the output files in the staging folder (``finish``,
bounded memory: tensor by tensor), and publishes them with ``smash_config.json`` as the output folder in one
atomic step (``publish``). slimkit's own save format and GGUF are the implementations here; compressed-tensors and
GPTQ checkpoints (:mod:`.checkpoint_format`, over the interop export's code) are further subclasses; every format
is registered in :data:`WRITERS` and driven by the one streaming loop.
"""

from __future__ import annotations

import os
import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from slimkit.core.io import atomic_directory

__all__ = ["RUN_FILE", "ModelWriter", "WriteContext", "WRITERS", "register_writer"]


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


class ModelWriter(ABC):
    """Writes a model piece by piece into ``stage`` and publishes the result (see the module doc)."""

    #: the format name algorithms ask for (``stream_format``) and the registry key
    format: ClassVar[str]

    def __init__(self, stage: Path, context: WriteContext) -> None:
        self.stage, self.context = Path(stage), context
        self.folder = self.stage / self.format
        self.folder.mkdir(parents=True, exist_ok=True)

    @abstractmethod
    def write(self, key: str, prefix: str, module: nn.Module, tied: dict[str, str]) -> None:
        """Stage module ``module`` (at dotted ``prefix`` in the model) as piece ``key``, atomically.

        ``tied`` maps names of this piece (full dotted names) to the canonical tensor they are tied to, which
        another piece (written earlier) holds.
        """

    @abstractmethod
    def written(self, key: str) -> bool:
        """Whether piece ``key`` is staged completely (a resumed run skips it)."""

    @abstractmethod
    def finish(self) -> dict[str, Any]:
        """Assemble the output files in the staging folder; return what the record needs (files, sizes, types)."""

    @abstractmethod
    def payload(self) -> dict[str, Any]:
        """Top-level fields of ``smash_config.json`` describing the weights (format, file, checksum...)."""

    @abstractmethod
    def outputs(self) -> list[Path]:
        """The assembled files that make up the output folder (besides ``smash_config.json``)."""

    def publish(self, output: Path, smash_config: Any, extra: dict[str, Any]) -> None:
        """Move the assembled files and ``smash_config.json`` into ``output`` in one atomic step.

        An earlier save in ``output`` is replaced only once everything is in place (``atomic_directory``).
        """
        with atomic_directory(output, replace=True) as tmp:
            for file in self.outputs():
                os.replace(file, tmp / file.name)
            smash_config.save_to_json(tmp, extra={**extra, **self.payload()})

    def discard(self) -> None:
        """Remove this writer's staged files."""
        shutil.rmtree(self.folder, ignore_errors=True)


#: format name -> writer class
WRITERS: dict[str, type[ModelWriter]] = {}


def register_writer(cls: type[ModelWriter]) -> type[ModelWriter]:
    """Class decorator adding a writer to :data:`WRITERS` under its ``format``."""
    if cls.format in WRITERS:
        raise ValueError(f"Two writers for format {cls.format!r}: {WRITERS[cls.format].__name__} and {cls.__name__}.")
    WRITERS[cls.format] = cls
    return cls
