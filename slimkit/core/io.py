"""Atomic file and directory writes: a reader (or a process killed mid-write) sees the old file or the new one.

Every file slimkit writes goes through here: JSON records, safetensors weights, plots, whole save directories.
A file is written to a temporary name in the same folder, flushed to disk, then renamed over the target
(``os.replace`` is atomic on POSIX and Windows); on any error the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["atomic_directory", "atomic_file", "recover_directory", "save_tensors_atomic", "write_json_atomic"]


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


_RENAME_EXCHANGE = 2  # linux/fs.h: swap two paths in one step
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap directories ``a`` and ``b`` in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``).

    Returns False where the kernel, C library or file system cannot (the caller then falls back).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, f"cannot swap {a} and {b}: {os.strerror(err)}")


def recover_directory(final: str | os.PathLike) -> bool:
    """Put back the previous ``final`` folder if a replacing write was killed between its two renames.

    Only the fallback path (no atomic exchange) has that window: the old folder sits in ``.<name>.old-*/old``
    while ``final`` is missing. Returns True when a folder was restored. Readers and writers call it first.
    """
    final = Path(final)
    if final.exists():
        return False
    for backup in sorted(p / "old" for p in final.parent.glob(f".{final.name}.old-*") if (p / "old").is_dir()):
        try:
            os.replace(backup, final)
        except OSError:
            continue
        shutil.rmtree(backup.parent, ignore_errors=True)
        return True
    return False


def _remove_stale(final: Path) -> None:
    """Remove the temporary and set-aside folders of writers to ``final`` that were killed (process gone)."""
    for kind in ("tmp", "old"):
        for folder in final.parent.glob(f".{final.name}.{kind}-*"):
            pid = folder.name[len(f".{final.name}.{kind}-"):].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but not ours
        return True
    return True


@contextlib.contextmanager
def atomic_directory(final: str | os.PathLike, replace: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``final``; on success it becomes ``final`` in one step.

    Readers, and a process killed at any moment, therefore see no folder, the complete old one or the complete
    new one. When another process finished the same folder first and ``replace`` is False, ours is discarded
    (both hold the same content). ``replace=True`` swaps out an existing folder (an earlier save) with one atomic
    exchange of the two (Linux ``renameat2``); where that is unavailable the old folder is moved aside first and
    :func:`recover_directory` (run by every later write and load) puts it back if the process died in between.
    On error the temporary folder is removed; temporary folders of killed writers are removed by the next write.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    recover_directory(final)
    _remove_stale(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-{os.getpid()}-", dir=final.parent))
    try:
        yield tmp
        for file in tmp.rglob("*"):
            if file.is_file():
                _fsync(file)
        if replace and final.is_dir() and _exchange(tmp, final):
            shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old folder
            return
        trash = None
        if replace and final.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-{os.getpid()}-", dir=final.parent))
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
