"""The format table: every checkpoint format slimkit writes or reads, by name (see :mod:`slimkit.formats`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn

from slimkit.formats import reader
from slimkit.formats.base import GGUF, SLIMKIT_LOAD, CheckpointFormat
from slimkit.formats.compressed_tensors import CompressedTensorsFormat
from slimkit.formats.gptq import GPTQFormat
from slimkit.formats.kinds import FLOAT, PACKED, PACKED_EXPERTS, FormatError, LayerKind, input_scale_fix, made_by
from slimkit.formats.slimkit_writer import SlimkitFormat
from slimkit.formats.writer import ModelWriter, WriteContext

#: GGUF's blocks hold this many consecutive weights of a row
_BLOCK = 32


class GGUFFormat(CheckpointFormat):
    """One GGUF file (weights + tokenizer) that llama.cpp runs, in a slimkit folder."""

    name = GGUF
    title = "GGUF in a slimkit folder"

    def holds(self) -> str:  # noqa: D102
        return (f"GGUF holds float weights and packed 4-bit (Q4_0/Q4_1) or 8-bit symmetric (Q8_0) layers whose group "
                f"size and row length are multiples of {_BLOCK}, with no input scale.")

    def refusals(self, kind: LayerKind) -> list[str]:  # noqa: D102
        if kind.kind == FLOAT:
            return []
        if kind.kind not in (PACKED, PACKED_EXPERTS):
            return [f"{kind.kind} weights, which have no GGUF block type here (keep the layer in float; the GGUF "
                    "float type q8_0 quantizes it)"]
        problems = []
        if kind.input_scale:
            problems.append(f"an input scale, which GGUF has no place for (exclude the layer, or set "
                            f"{input_scale_fix()})")
        row = kind.group_size or kind.in_features
        if row is not None and (row % _BLOCK or (kind.in_features or 0) % _BLOCK):
            problems.append(f"groups of {row} weights (rows of {kind.in_features}), where GGUF blocks hold {_BLOCK}")
        if kind.bits != 4 and not (kind.bits == 8 and kind.sym):
            problems.append(f"{kind.bits}-bit {'asymmetric ' if kind.bits == 8 else ''}codes, which no GGUF block "
                            "type holds exactly (4-bit, or 8-bit symmetric)")
        return problems

    def writer(self, stage: Path, context: WriteContext) -> ModelWriter:  # noqa: D102
        from slimkit.formats.gguf_writer import GGUFWriter  # needs the optional gguf package

        return GGUFWriter(stage, context)

    def loading(self, model: nn.Module) -> list[str]:  # noqa: D102
        return [
            SLIMKIT_LOAD + " (runs `model.gguf` with llama.cpp through llama-cpp-python).",
            "- **llama.cpp**: `llama-cli -m DIR/model.gguf`, or any GGUF runtime (the file holds the weights and the "
            "tokenizer).",
            "- **transformers**, **vLLM**: not this folder; write the compressed-tensors format instead (`slimkit "
            "smash ... --format compressed-tensors`, or `save_pretrained(DIR, format=\"compressed-tensors\")`).",
        ]


class ONNXFormat(CheckpointFormat):
    """An ONNX graph with its weights (``model.onnx``) that ONNX Runtime runs, in a slimkit folder."""

    name = "onnx"
    title = "ONNX in a slimkit folder"

    def holds(self) -> str:  # noqa: D102
        return "ONNX export takes float modules; int8 is made inside the graph by the compiler that writes it."

    def refusals(self, kind: LayerKind) -> list[str]:  # noqa: D102
        return [] if kind.kind == FLOAT else [f"{kind.kind} weights, which torch's ONNX export does not take "
                                              "(compile the float model and let the ONNX compiler quantize it)"]


#: every checkpoint format, by name
FORMATS: dict[str, CheckpointFormat] = {f.name: f for f in (
    SlimkitFormat(), GGUFFormat(), CompressedTensorsFormat(), GPTQFormat(), ONNXFormat())}


def get_format(name: str) -> CheckpointFormat:
    """The format called ``name``, or a FormatError listing the formats."""
    if name not in FORMATS:
        raise FormatError(f"Unknown checkpoint format {name!r}; use one of {', '.join(repr(f) for f in FORMATS)}.")
    return FORMATS[name]


def export_names() -> list[str]:
    """The formats ``save_pretrained(format=...)`` and ``slimkit smash --format`` write."""
    return [n for n, f in FORMATS.items() if f.exports]


def export_format(name: str) -> Any:
    """The format ``save_pretrained(DIR, format=name)`` writes, or a FormatError saying which ones it writes."""
    fmt, names = FORMATS.get(name), ", ".join(repr(n) for n in export_names())
    if fmt is None:
        raise FormatError(f"Unknown checkpoint format {name!r}; save_pretrained writes {names}.")
    if not fmt.exports:
        by = made_by(name)
        raise FormatError(f"save_pretrained does not write {name!r}: {f'the {by[0]} compiler' if by else 'a compiler'}"
                          f" writes it as its result (add it to the SmashConfig). save_pretrained writes {names}.")
    return fmt


def read_quantization_config(folder: str | os.PathLike) -> tuple[str | None, dict[str, Any]]:
    """``(format name, quantization_config)`` of another tool's folder; ``(None, {})`` when it is not quantized."""
    methods = {f.quant_method: f.name for f in FORMATS.values() if f.reads}  # type: ignore[attr-defined]
    return reader.read_quantization_config(folder, methods)


__all__ = ["FORMATS", "GGUFFormat", "ONNXFormat", "export_format", "export_names", "get_format",
           "read_quantization_config"]
