"""Atomic file and directory writes: a reader (or a process killed mid-write) sees the old file or the new one.

Every file slimkit writes goes through here: JSON records, safetensors weights, plots, whole save directories.
A file is written to a temporary name in the same folder, flushed to disk, then renamed over the target
(``os.replace`` is atomic on POSIX and Windows); on any error the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["atomic_directory", "atomic_file", "save_tensors_atomic", "write_json_atomic"]


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; once the block succeeds it replaces ``path`` in one step.

    ``suffix`` keeps the extension writers sniff (``".png"``, ``".onnx"``). The parent folder is created.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike, payload: Any, indent: int = 2) -> Path:
    """Write ``payload`` as sorted, indented JSON to ``path`` atomically; return the path."""
    text = json.dumps(payload, indent=indent, sort_keys=True) + "\n"
    with atomic_file(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def save_tensors_atomic(tensors: Mapping[str, Any], path: str | os.PathLike, fmt: str | None = None,
                        metadata: Mapping[str, str] | None = None) -> Path:
    """Write ``{name: tensor}`` as a safetensors file atomically; ``fmt`` goes into the metadata as ``format``.

    Tensors are detached, moved to the CPU and made contiguous; tensors sharing storage are cloned apart.
    """
    from safetensors.torch import save_file  # safetensors is a dependency; imported here to keep core light

    meta = dict(metadata or {})
    if fmt is not None:
        meta["format"] = fmt
    seen: set[int] = set()
    flat = {}
    for key, value in tensors.items():
        tensor = value.detach().cpu().contiguous()
        ptr = tensor.untyped_storage().data_ptr() if tensor.numel() else -1
        if ptr in seen:
            tensor = tensor.clone()
        elif ptr != -1:
            seen.add(ptr)
        flat[key] = tensor
    with atomic_file(path) as tmp:
        save_file(flat, str(tmp), metadata=meta or None)
    return Path(path)


@contextlib.contextmanager
def atomic_directory(final: str | os.PathLike, replace: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``final``; on success it is renamed to ``final`` in one step.

    Readers therefore see either no folder or a complete one. When another process finished the same folder
    first and ``replace`` is False, ours is discarded (both hold the same content). ``replace=True`` swaps out
    an existing folder (an earlier save): the old one is moved aside first and deleted only after the new one
    is in place. On error the temporary folder is removed and nothing is left behind.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        for file in tmp.rglob("*"):
            if file.is_file():
                _fsync(file)
        trash = None
        if replace and final.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
            os.replace(final, trash / "old")
        try:
            os.replace(tmp, final)
        except OSError:
            if not final.is_dir():  # not a lost race: a real failure
                raise
            shutil.rmtree(tmp, ignore_errors=True)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
