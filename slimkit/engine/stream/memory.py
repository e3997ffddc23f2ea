"""Memory of this process (resident set now and at its peak) and the machine's available memory, from /proc.

Linux only; elsewhere the functions return 0 and the streaming run simply shows no figures. ``release()`` hands
freed heap memory back to the operating system (glibc ``malloc_trim``), so the resident set follows what the
run really holds between blocks.
"""

from __future__ import annotations

import ctypes
import re
import sys
from pathlib import Path

__all__ = ["available_bytes", "peak_rss_bytes", "release", "rss_bytes", "format_bytes", "parse_bytes"]

_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 10**3, "KIB": 2**10, "M": 2**20, "MB": 10**6, "MIB": 2**20,
          "G": 2**30, "GB": 10**9, "GIB": 2**30, "T": 2**40, "TB": 10**12, "TIB": 2**40}


def _status_kb(field: str, path: str = "/proc/self/status") -> int:
    try:
        text = Path(path).read_text()
    except OSError:
        return 0
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else 0


def rss_bytes() -> int:
    """Resident set size of this process now (0 where /proc is missing)."""
    return _status_kb("VmRSS")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (0 where /proc is missing)."""
    return _status_kb("VmHWM")


def available_bytes() -> int:
    """Memory the machine can give without swapping (MemAvailable; 0 where /proc is missing)."""
    return _status_kb("MemAvailable", "/proc/meminfo")


def release() -> None:
    """Return freed heap pages to the OS (glibc); a no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def format_bytes(n: float) -> str:
    """``1.23 GB`` style (powers of 1000, as disk and RAM figures are usually quoted here)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"  # pragma: no cover


def parse_bytes(text: str | int | float) -> int:
    """``"4GB"``, ``"3.5 GiB"``, ``"512M"`` or a number of bytes -> bytes; ValueError on anything else."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return int(text)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).upper() not in _UNITS:
        raise ValueError(f"{text!r} is not a size: write e.g. 4GB, 3.5GiB, 512MB or a number of bytes.")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])
