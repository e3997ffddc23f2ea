"""GGUF for llama.cpp, written piece by piece: a thin adapter over :mod:`slimkit.engines.gguf`.

Each piece's tensors are named, transformed and encoded exactly as :func:`~slimkit.engines.gguf.export_gguf`
does (the family table, the row orders, packed low-bit grids as GGUF blocks, floats as F32/F16/Q8_0) and staged
as raw bytes with a small JSON index. Large float matrices (an 8B model's embedding) are encoded in row chunks,
so no piece is held twice. ``finish`` writes the GGUF header, metadata and tokenizer, then copies each tensor's
bytes into place in bounded chunks: the file is never held in memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from torch import nn

from slimkit.core.io import atomic_file, write_json_atomic
from slimkit.engines.gguf.export import GGUFLayout
from slimkit.engines.gguf.tensors import Packed, encode
from slimkit.formats.base import GGUF
from slimkit.formats.writer import ModelWriter, WriteContext, copy_bytes

__all__ = ["GGUFWriter"]

GGUF_FILE = "model.gguf"
#: float matrices above this many bytes (float32) are encoded in row chunks
_CHUNK_BYTES = 64 * 2**20


class GGUFWriter(ModelWriter):
    """One GGUF file (weights + tokenizer) that llama.cpp runs, staged piece by piece."""

    format = GGUF

    def __init__(self, stage: Path, context: WriteContext) -> None:
        super().__init__(stage, context)
        dtype = str(context.options["dtype"]) if context.options is not None else "f32"
        self.layout = GGUFLayout(context.model, context.tokenizer, dtype)

    piece_suffixes = (".bin", ".json")  # the tensors' bytes, then their index

    # ------------------------------------------------------------------------------------------ pieces
    def _encode(self, name: str, value: Any) -> list[tuple[np.ndarray, Any]]:
        """Encoded chunks of one tensor: a big float matrix in row chunks (every GGUF type here is row-wise)."""
        float_type = self.layout.float_type
        if isinstance(value, Packed) or value.dim() != 2 or value.numel() * 4 <= _CHUNK_BYTES:
            return [encode(name, value, float_type)]
        rows = max(1, _CHUNK_BYTES // (4 * value.shape[1]))
        return [encode(name, value[i : i + rows], float_type) for i in range(0, value.shape[0], rows)]

    @torch.no_grad()
    def write(self, key: str, prefix: str, module: nn.Module, tied: dict[str, str]) -> None:  # noqa: D102
        data_file, index_file = self.piece_files(key)
        index, offset = [], 0
        with atomic_file(data_file, suffix=".bin") as tmp, open(tmp, "wb") as out:
            for gguf_name, hf_name, value in self.layout.tensors(module, prefix, tied):
                chunks = self._encode(hf_name, value)
                raw = chunks[0][1]
                shape = list(chunks[0][0].shape)
                shape[0] = sum(c.shape[0] for c, _ in chunks) if len(chunks) > 1 else shape[0]
                nbytes = 0
                for data, _ in chunks:
                    data.tofile(out)
                    nbytes += data.nbytes
                index.append({"name": gguf_name, "shape": shape, "dtype": chunks[0][0].dtype.str, "nbytes": nbytes,
                              "raw": None if raw is None else int(raw), "offset": offset})
                offset += nbytes
            out.flush()
        write_json_atomic(index_file, index)  # written last: the piece counts as written once it exists

    # ------------------------------------------------------------------------------------------ the file
    def finish(self, order: list[str] | None = None) -> dict[str, Any]:
        """Write ``model.gguf`` from the staged pieces (``order``: their keys) with metadata and tokenizer."""
        tensors = [(key, t) for key in self.piece_keys(order) for t in json.loads(self.piece_files(key)[1].read_text())]
        types = {t["name"]: (gguf.GGMLQuantizationType(t["raw"]).name if t["raw"] is not None
                             else gguf.GGMLQuantizationType[np.dtype(t["dtype"]).name.replace("float", "F")].name)
                 for _, t in tensors}
        file_type = self.layout.file_type(types)
        target = self.stage / GGUF_FILE
        with atomic_file(target, suffix=".gguf") as tmp:
            writer = self.layout.open_file(tmp)
            for _, t in tensors:
                raw = None if t["raw"] is None else gguf.GGMLQuantizationType(t["raw"])
                writer.add_tensor_info(t["name"], t["shape"], np.dtype(t["dtype"]), t["nbytes"], raw_dtype=raw)
            writer.add_file_type(file_type)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            fout = writer.fout[0]
            writer.write_padding(fout, fout.tell())
            for key, t in tensors:
                with open(self.piece_files(key)[0], "rb") as source:
                    source.seek(t["offset"])
                    copy_bytes(source, fout, t["nbytes"])
                writer.write_padding(fout, t["nbytes"])
            writer.close()
        return {**self.layout.summary(types, file_type, target), "files": [GGUF_FILE]}

    def payload(self) -> dict[str, Any]:  # noqa: D102
        return {"weights_format": "artifacts", "weights_file": None}

    def outputs(self) -> list[Path]:  # noqa: D102
        return [self.stage / GGUF_FILE]
