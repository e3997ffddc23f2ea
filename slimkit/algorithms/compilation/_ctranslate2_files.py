"""CTranslate2's ``model.bin`` checked before CTranslate2 opens it (its loader crashes the process on a damaged file).

The layout is CTranslate2's (``ModelSpec._serialize``): binary version, spec name, revision, then each variable as
name, rank, dims, dtype id, byte count and bytes, then aliases. :func:`check_model_bin` walks it and refuses any
file whose counts, sizes or strings do not add up to exactly its length, naming the file and the offset.
"""

from __future__ import annotations

import hashlib
import math
import struct
from pathlib import Path

from slimkit.errors import SaveLoadError

#: element bytes of CTranslate2's dtype ids (float32, int8, int16, int32, float16, bfloat16)
DTYPE_BYTES = (4, 1, 2, 4, 2, 2)
#: binary versions this slimkit has seen CTranslate2 write (4.x writes 6)
VERSIONS = range(1, 7)
MAX_RANK = 8


def file_digest(path: Path) -> str:
    """SHA-256 of ``path`` (recorded at smash time, checked on load)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _Reader:
    def __init__(self, path: Path) -> None:
        self.path, self.data, self.at = path, path.read_bytes(), 0

    def fail(self, what: str) -> SaveLoadError:
        return SaveLoadError(f"{self.path} is damaged ({what} at byte {self.at} of {len(self.data)}): it is not a "
                             "model.bin CTranslate2 wrote. Save the smashed model again.")

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise self.fail("the file ends early")
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return int(value)

    def skip(self, size: int, what: str) -> None:
        if self.at + size > len(self.data):
            raise self.fail(f"{what} runs past the end")
        self.at += size

    def string(self) -> str:
        size = self.take("H")
        start = self.at
        self.skip(size, "a name")
        raw = self.data[start : self.at]
        if size == 0 or raw[-1] != 0:
            raise self.fail("a name without its terminator")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail("a name that is not UTF-8") from exc


def check_model_bin(path: Path) -> None:
    """Raise SaveLoadError unless ``path`` is a well-formed CTranslate2 ``model.bin``."""
    reader = _Reader(path)
    if reader.take("I") not in VERSIONS:
        raise reader.fail("an unknown binary version")
    reader.string()  # the spec name
    reader.take("I")  # revision
    names = set()
    for _ in range(reader.take("I")):
        names.add(reader.string())
        rank = reader.take("B")
        if rank > MAX_RANK:
            raise reader.fail(f"a variable of rank {rank}")
        dims = [reader.take("I") for _ in range(rank)]
        dtype = reader.take("B")
        if dtype >= len(DTYPE_BYTES):
            raise reader.fail(f"dtype id {dtype}")
        size = reader.take("I")
        if size != math.prod(dims) * DTYPE_BYTES[dtype]:
            raise reader.fail(f"a variable of shape {dims} holding {size} bytes")
        reader.skip(size, "a variable")
    for _ in range(reader.take("I")):
        reader.string()
        if reader.string() not in names:
            raise reader.fail("an alias of a variable the file does not hold")
    if reader.at != len(reader.data):
        raise reader.fail("bytes after the last alias")
