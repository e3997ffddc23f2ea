"""slimkit's own save format, written piece by piece: one ``model.safetensors`` + ``smash_config.json``.

Each piece is staged as its own safetensors file (tensors flattened as the in-memory save does, tied weights as
``__alias__`` entries). ``finish`` concatenates them into one ``model.safetensors`` without loading any tensor:
it writes the merged header, then copies each tensor's bytes in bounded chunks while computing the SHA-256 the
save records (``weights_sha256``). The result loads with ``SmashedModel.from_pretrained`` like any save.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from torch import nn

from slimkit.core.io import atomic_file, save_tensors_atomic
from slimkit.core.tensors import alias_entry, flatten_state_dict
from slimkit.formats.base import SLIMKIT_LOAD, CheckpointFormat, llama_cpp_line
from slimkit.formats.kinds import LayerKind
from slimkit.formats.writer import ModelWriter, WriteContext, copy_bytes

__all__ = ["FORMAT_VERSION", "SLIMKIT", "WEIGHTS_FILE", "SlimkitFormat", "SlimkitWriter", "concat_safetensors"]

SLIMKIT = "slimkit"
#: the ``format_version`` of ``smash_config.json`` this slimkit writes and reads
FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"



def _header(file: Path) -> tuple[dict[str, Any], int]:
    """A safetensors ``file``'s tensor entries in storage order, and where its data starts (reads the header only)."""
    with open(file, "rb") as handle:
        size = struct.unpack("<Q", handle.read(8))[0]
        parsed = json.loads(handle.read(size))
    parsed.pop("__metadata__", None)
    return dict(sorted(parsed.items(), key=lambda item: item[1]["data_offsets"][0])), 8 + size


def tensor_names(file: Path) -> list[str]:
    """The tensor names of a safetensors ``file`` in storage order (reads the header only)."""
    return list(_header(file)[0])


def concat_safetensors(files: list[Path], target: Path, metadata: dict[str, str],
                       skip: frozenset[str] | set[str] = frozenset()) -> str:
    """Write the tensors of ``files`` (in order) into one safetensors file ``target`` atomically; return its SHA-256.

    Memory stays at one copy buffer whatever the sizes. A name found in two files is an error; names in ``skip``
    are left out.
    """
    entries: list[tuple[str, dict[str, Any], Path, int]] = []
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    offset = 0
    for file in files:
        parsed, data_start = _header(file)
        for name, entry in parsed.items():
            if name in skip:
                continue
            if name in header:
                raise ValueError(f"Tensor {name!r} appears in two staged pieces ({file.name}).")
            start, end = entry["data_offsets"]
            header[name] = {"dtype": entry["dtype"], "shape": entry["shape"],
                            "data_offsets": [offset, offset + end - start]}
            entries.append((name, entry, file, data_start + start))
            offset += end - start
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    digest = hashlib.sha256()
    with atomic_file(target, suffix=".safetensors") as tmp, open(tmp, "wb") as out:
        for piece in (struct.pack("<Q", len(raw)), raw):
            out.write(piece)
            digest.update(piece)
        handles: dict[Path, Any] = {}
        try:
            for _name, entry, file, position in entries:
                source = handles.get(file) or handles.setdefault(file, open(file, "rb"))  # noqa: SIM115
                source.seek(position)
                copy_bytes(source, out, entry["data_offsets"][1] - entry["data_offsets"][0], digest)
        finally:
            for handle in handles.values():
                handle.close()
        out.flush()
    return digest.hexdigest()


class SlimkitWriter(ModelWriter):
    """slimkit's save format (``model.safetensors`` + ``smash_config.json``), staged piece by piece."""

    format = SLIMKIT

    def __init__(self, stage: Path, context: Any) -> None:
        super().__init__(stage, context)
        self._sha256: str | None = None

    def write(self, key: str, prefix: str, module: nn.Module, tied: dict[str, str]) -> None:  # noqa: D102
        state = {f"{prefix}.{k}" if prefix else k: v for k, v in module.state_dict().items()}
        flat: dict[str, Any] = {}
        for name, canonical in tied.items():
            state.pop(name, None)
            flat.update(alias_entry(name, canonical))
        flat.update(flatten_state_dict(state))
        save_tensors_atomic(flat, self.piece_files(key)[0], fmt="pt")

    def finish(self, order: list[str] | None = None) -> dict[str, Any]:
        """Concatenate the staged pieces (``order``: their keys; default all, sorted) into ``model.safetensors``."""
        target = self.stage / WEIGHTS_FILE
        self._sha256 = concat_safetensors([self.piece_files(k)[0] for k in self.piece_keys(order)], target,
                                          {"format": "pt", "slimkit_format": str(FORMAT_VERSION)})
        return {"files": [WEIGHTS_FILE], "bytes": target.stat().st_size, "sha256": self._sha256}

    def payload(self) -> dict[str, Any]:  # noqa: D102
        return {"weights_format": "safetensors", "weights_file": WEIGHTS_FILE, "weights_sha256": self._sha256}

    def outputs(self) -> list[Path]:  # noqa: D102
        return [self.stage / WEIGHTS_FILE]


class SlimkitFormat(CheckpointFormat):
    """slimkit's own folder: ``smash_config.json`` + ``model.safetensors``; it holds every kind of layer."""

    name = SLIMKIT
    title = "slimkit format"
    exports = True

    def holds(self) -> str:  # noqa: D102
        return "slimkit's format holds every layer slimkit makes (it replays each algorithm on load)."

    def refusals(self, kind: LayerKind) -> list[str]:  # noqa: D102
        return []

    def writer(self, stage: Path, context: WriteContext) -> SlimkitWriter:  # noqa: D102
        return SlimkitWriter(stage, context)

    def loading(self, model: nn.Module) -> list[str]:  # noqa: D102
        return [
            SLIMKIT_LOAD + " (this is slimkit's own format).",
            "- **transformers**: not directly (slimkit's packed layers are its own); save with "
            "`save_pretrained(DIR, format=\"compressed-tensors\")` for a folder transformers and vLLM open.",
            "- **vLLM**: not this folder; export to `compressed-tensors` or `gptq` first.",
            llama_cpp_line(model, in_slimkit=True),
        ]
