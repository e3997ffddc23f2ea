"""Build and call the fused low-bit CPU kernel (``_native.c``) through ctypes.

The C file is compiled once per machine with the system C compiler (``cc -O3 -march=native -fopenmp``) into
``$SLIMKIT_CACHE`` (default ``~/.cache/slimkit``)/native, keyed by a hash of the source, the flags and the
CPU, then loaded with ctypes. It links the same ``libgomp.so.1`` that torch has already loaded, so its threads
are torch's threads. When no compiler is present, the build fails, or ``SLIMKIT_NATIVE=0`` is set, :func:`kernel`
returns ``None`` (once, with a warning for failures) and callers use the pure-torch path.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("_native.c")
FLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-shared", "-fPIC", "-std=gnu11")
#: largest number of input rows the kernel takes (decode and short batches)
MAX_ROWS = 8
_STATE: dict[str, object] = {}


def cache_dir() -> Path:
    """Where compiled kernels are kept (``$SLIMKIT_CACHE/native`` or ``~/.cache/slimkit/native``)."""
    root = os.environ.get("SLIMKIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "slimkit")
    return Path(root) / "native"


def _cpu_signature() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "|".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags"))}))
    except OSError:
        return platform.processor() or platform.machine()


def _build(compiler: str) -> Path:
    source = SOURCE.read_bytes()
    key = hashlib.sha256(b"\0".join([source, " ".join(FLAGS).encode(), compiler.encode(),
                                     _cpu_signature().encode()])).hexdigest()[:16]
    target = cache_dir() / f"lowbit-{key}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".lowbit-", suffix=".so")
    os.close(fd)
    try:
        done = subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", tmp], capture_output=True, text=True,
                              timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-500:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _load() -> ctypes.CDLL | None:
    if os.environ.get("SLIMKIT_NATIVE", "1") == "0":
        return None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None or platform.system() != "Linux":
        return None
    try:
        lib = ctypes.CDLL(str(_build(compiler)))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        warnings.warn(f"slimkit could not build its low-bit CPU kernel ({exc}); packed layers use the slower "
                      "pure-torch path. Set SLIMKIT_NATIVE=0 to silence this.", RuntimeWarning, stacklevel=3)
        return None
    lib.slimkit_lowbit_simd.restype = ctypes.c_int
    if lib.slimkit_lowbit_simd() == 0:  # no AVX2: the plain-C build is slower than the torch path
        return None
    fn = lib.slimkit_lowbit_matmul
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn.argtypes = [ptr, i64, i64, ptr, i64, i64, ptr, ptr, i64, i64, ctypes.c_int, ptr, ptr, ctypes.c_int]
    fn.restype = ctypes.c_int
    deq = lib.slimkit_lowbit_dequantize_planar
    deq.argtypes = [ptr, i64, i64, ptr, ptr, i64, i64, ctypes.c_int, ptr, ctypes.c_int]
    deq.restype = ctypes.c_int
    return lib


def kernel() -> ctypes.CDLL | None:
    """The loaded kernel library, building it on first use; ``None`` when unavailable (see the module doc).

    Unavailable also means a CPU without AVX2, where the plain-C build is slower than the pure-torch path.
    """
    if "lib" not in _STATE:
        _STATE["lib"] = _load()
    return _STATE["lib"]  # type: ignore[return-value]


def matmul(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, bits: int,
           group_size: int, out_features: int, bias: torch.Tensor | None) -> torch.Tensor | None:
    """``x [m, k] @ dequant(W)^T + bias`` for fp32 CPU ``x`` with ``m <= MAX_ROWS``; ``None`` if not applicable."""
    lib = kernel()
    m, k = x.shape
    if (lib is None or m > MAX_ROWS or x.dtype != torch.float32 or x.requires_grad
            or scales.dtype != torch.float16 or zeros.dtype != torch.float16
            or not (qweight.is_contiguous() and scales.is_contiguous() and zeros.is_contiguous())):
        return None
    x = x.contiguous()
    if bias is not None:
        bias = bias.detach().to(torch.float32).contiguous()
    y = torch.empty(m, out_features, dtype=torch.float32)
    code = lib.slimkit_lowbit_matmul(
        x.data_ptr(), m, k, qweight.data_ptr(), out_features, qweight.shape[1], scales.data_ptr(),
        zeros.data_ptr(), scales.shape[1], group_size, bits, None if bias is None else bias.data_ptr(),
        y.data_ptr(), torch.get_num_threads())
    if code != 0:
        return None
    return y


#: bits -> (values per packing unit, bytes per unit)
_UNIT = {2: (4, 1), 3: (8, 3), 4: (2, 1), 8: (1, 1)}


def planar_matmul(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, bits: int,
                  group_size: int, in_features: int, bias: torch.Tensor | None) -> torch.Tensor | None:
    """``x [m, k] @ dequant(W)^T + bias`` for long fp32 CPU inputs (prefill); ``None`` if not applicable.

    The C kernel dequantises the weight once, in planar column order (every store a full vector), and the input's
    columns are permuted to match, so one dense matmul does the rest. The dense weight lives only for this call.
    """
    lib = kernel()
    if (lib is None or x.dtype != torch.float32 or x.requires_grad or scales.dtype != torch.float16
            or zeros.dtype != torch.float16
            or not (qweight.is_contiguous() and scales.is_contiguous() and zeros.is_contiguous())):
        return None
    per, nbytes = _UNIT[bits]
    out_f, units = qweight.shape[0], qweight.shape[1] // nbytes
    weight = torch.empty(out_f, per * units, dtype=torch.float32)
    code = lib.slimkit_lowbit_dequantize_planar(qweight.data_ptr(), out_f, qweight.shape[1], scales.data_ptr(),
                                                zeros.data_ptr(), scales.shape[1], group_size, bits,
                                                weight.data_ptr(), torch.get_num_threads())
    if code != 0:
        return None
    m = x.shape[0]
    planar = torch.nn.functional.pad(x, (0, per * units - in_features)).view(m, units, per).transpose(1, 2)
    return torch.nn.functional.linear(planar.reshape(m, per * units), weight,
                                      None if bias is None else bias.detach().to(torch.float32))
