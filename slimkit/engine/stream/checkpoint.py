"""A Hugging Face model folder read tensor by tensor: safetensors shards, never the whole model, never pickle.

The folder holds ``config.json`` and either one ``*.safetensors`` file or shards listed by
``model.safetensors.index.json``. Only the shard headers are read up front (names, dtypes, shapes, offsets);
tensors are materialized on request through safetensors' memory-mapped ``safe_open``, so reading one decoder
block costs that block's bytes. A folder with only PyTorch pickle files (``pytorch_model.bin``, ``*.pt``) is
refused with the command that converts it: slimkit never unpickles.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from slimkit.errors import ConfigError
from slimkit.zoo.sources import SHARD_INDEX, safetensors_files

__all__ = ["Checkpoint", "TensorInfo", "DTYPES"]

#: safetensors dtype names -> torch dtypes (those a causal LM checkpoint holds)
DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
_MAX_HEADER = 100 * 2**20


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: its file, dtype, shape and byte range (relative to the file's data section)."""

    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        """Bytes stored."""
        return self.end - self.start

    @property
    def numel(self) -> int:
        """Elements."""
        return math.prod(self.shape)


def _read_header(file: Path) -> tuple[dict[str, Any], bytes]:
    try:
        with open(file, "rb") as handle:
            raw = handle.read(8)
            size = struct.unpack("<Q", raw)[0] if len(raw) == 8 else -1
            if not 0 < size <= _MAX_HEADER:
                raise ValueError(f"header length {size}")
            header = handle.read(size)
        parsed = json.loads(header)
        if not isinstance(parsed, dict):
            raise ValueError("header is not a JSON object")
    except (OSError, ValueError, struct.error) as exc:
        raise ConfigError(f"{file} is not a readable safetensors file ({exc}): it is truncated or corrupt.") from exc
    return parsed, header


class Checkpoint:
    """The tensors of a model folder: names, dtypes, shapes, files (headers only), and reads by name."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.files = self._weight_files()
        self.tensors: dict[str, TensorInfo] = {}
        self._headers: dict[Path, bytes] = {}
        for file in self.files:
            header, raw = _read_header(file)
            self._headers[file] = raw
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                info = self._entry(file, name, entry)
                if name in self.tensors:
                    raise ConfigError(f"{name} is stored twice ({self.tensors[name].file.name} and {file.name}): "
                                      f"{self.folder} is not one consistent checkpoint.")
                self.tensors[name] = info

    # ------------------------------------------------------------------------------------------ folder checks
    def _weight_files(self) -> list[Path]:
        folder = self.folder
        if not folder.is_dir():
            raise ConfigError(f"{folder} is not a folder: give a Hugging Face model folder (config.json + "
                              "*.safetensors).")
        if not (folder / "config.json").is_file():
            raise ConfigError(f"{folder} has no config.json, so it is not a Hugging Face model folder.")
        files = safetensors_files(folder)
        if not files:
            raise ConfigError(f"{folder} has no *.safetensors weights (and no {SHARD_INDEX}).")
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ConfigError(f"{folder / SHARD_INDEX} lists shards that are not in {folder}: "
                              f"{', '.join(missing[:5])}. Copy the whole model folder.")
        return files

    def _entry(self, file: Path, name: str, entry: Any) -> TensorInfo:
        try:
            dtype = DTYPES[entry["dtype"]]
            shape = tuple(int(d) for d in entry["shape"])
            start, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{file}: tensor {name!r} has an unreadable or unsupported header entry {entry!r} "
                              f"(supported dtypes: {', '.join(DTYPES)}).") from exc
        info = TensorInfo(file, dtype, shape, start, end)
        if info.nbytes != info.numel * dtype.itemsize:
            raise ConfigError(f"{file}: tensor {name!r} claims shape {shape} in {entry['dtype']} but spans "
                              f"{info.nbytes} bytes: the file is corrupt.")
        return info

    # ------------------------------------------------------------------------------------------ questions
    def config(self) -> dict[str, Any]:
        """The parsed ``config.json``."""
        try:
            return json.loads((self.folder / "config.json").read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self.folder / 'config.json'} is not valid JSON ({exc}).") from exc

    def dtype(self) -> torch.dtype:
        """The floating dtype holding most of the bytes (the checkpoint's storage dtype)."""
        totals: dict[torch.dtype, int] = {}
        for info in self.tensors.values():
            if info.dtype.is_floating_point:
                totals[info.dtype] = totals.get(info.dtype, 0) + info.nbytes
        if not totals:
            raise ConfigError(f"{self.folder} holds no floating-point tensors.")
        return max(totals, key=totals.__getitem__)

    def names_under(self, prefix: str) -> list[str]:
        """Tensor names inside module ``prefix`` (``""``: all)."""
        if not prefix:
            return list(self.tensors)
        return [n for n in self.tensors if n.startswith(prefix + ".")]

    def nbytes(self, names: Iterable[str], dtype: torch.dtype | None = None) -> int:
        """Bytes of ``names`` as stored, or in ``dtype`` (floating tensors only) when given."""
        infos = [self.tensors[n] for n in names]
        return sum(i.numel * (dtype if dtype is not None and i.dtype.is_floating_point else i.dtype).itemsize
                   for i in infos)

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this checkpoint cheaply: config.json and each file's size and header digest."""
        digest = hashlib.sha256((self.folder / "config.json").read_bytes())
        files = {}
        for file in self.files:
            digest.update(self._headers[file])
            files[file.name] = file.stat().st_size
        return {"folder": str(self.folder.resolve()), "files": files, "headers_sha256": digest.hexdigest()}

    # ------------------------------------------------------------------------------------------ reads
    def read(self, names: Iterable[str], dtype: torch.dtype | None = None,
             device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        """Materialize ``names`` (floating ones cast to ``dtype`` when given) on ``device``; one file open each."""
        by_file: dict[Path, list[str]] = {}
        for n in names:
            if n not in self.tensors:
                raise ConfigError(f"{self.folder} has no tensor {n!r}.")
            by_file.setdefault(self.tensors[n].file, []).append(n)
        out: dict[str, torch.Tensor] = {}
        for file, wanted in by_file.items():
            try:
                with safe_open(str(file), framework="pt", device="cpu") as handle:
                    for n in wanted:
                        t = handle.get_tensor(n)
                        if dtype is not None and t.is_floating_point() and t.dtype != dtype:
                            t = t.to(dtype)
                        out[n] = t.to(device) if str(device) != "cpu" else t
            except (SafetensorError, OSError) as exc:
                raise ConfigError(f"{file} cannot be read ({exc}): the file is truncated or corrupt.") from exc
        return out
