"""Build and call the fused low-bit CPU kernel (``_native.c``) through ctypes.

The C file is compiled once per machine and instruction set with the system C compiler (``cc -O3 -march=native
-fopenmp``) into ``$SLIMKIT_CACHE`` (default ``~/.cache/slimkit``)/native, keyed by a hash of the source, the
flags and the CPU, then loaded with ctypes. It links the same ``libgomp.so.1`` that torch has already loaded, so
its threads are torch's threads. When no compiler is present, the build fails, or ``SLIMKIT_NATIVE=0`` is set,
:func:`kernel` returns ``None`` (once, with a warning for failures) and callers use the pure-torch path.

Instruction set: ``SLIMKIT_NATIVE_ISA`` (or :func:`use_isa`) picks the build: ``auto`` (default: the best this
CPU has), ``avx512`` or ``avx2`` (``-mno-avx512f``: the AVX2 + FMA kernel even on an AVX-512 CPU, so that path
can be built, tested and timed anywhere AVX2 exists). Each is built and cached separately; a forced set the CPU
lacks (see :func:`cpu_supports`) gives ``None`` with a warning, never an illegal instruction.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from slimkit.core.io import atomic_file

SOURCE = Path(__file__).with_name("_native.c")
_COMMON = ("-O3", "-fopenmp", "-shared", "-fPIC", "-std=gnu11")
#: compiler flags per instruction set (``auto`` and ``avx512`` differ only in what the CPU must have)
ISA_FLAGS = {
    "auto": ("-march=native", "-mprefer-vector-width=512", *_COMMON),
    "avx512": ("-march=native", "-mprefer-vector-width=512", *_COMMON),
    "avx2": ("-march=native", "-mno-avx512f", "-mprefer-vector-width=256", *_COMMON),
}
FLAGS = ISA_FLAGS["auto"]
#: CPU flags (``/proc/cpuinfo``) each forced instruction set needs
ISA_NEEDS = {"avx512": ("avx512f", "avx512bw", "avx512vl", "avx2", "fma", "f16c"), "avx2": ("avx2", "fma", "f16c")}
#: vector width the library reports -> instruction set name
_SIMD_NAMES = {512: "avx512", 256: "avx2"}
#: largest number of input rows the kernel takes (decode and short batches)
MAX_ROWS = 8
#: decode calls on fewer weights than this run on one thread: waking a second OpenMP thread (futex wake-up under
#: ``OMP_WAIT_POLICY=PASSIVE``, worse when another process holds the other core) costs more than it saves
PARALLEL_MIN_WEIGHTS = 1 << 21
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


def cpu_flags() -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where it cannot be read)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_supports(isa: str) -> bool:
    """Whether this CPU can run the ``isa`` build (``auto`` always can: it targets the CPU itself)."""
    if isa == "auto":
        return True
    return set(ISA_NEEDS[isa]) <= cpu_flags()


def requested_isa() -> str:
    """The instruction set asked for: :func:`use_isa`'s, else ``$SLIMKIT_NATIVE_ISA``, else ``auto``."""
    isa = str(_STATE.get("isa") or os.environ.get("SLIMKIT_NATIVE_ISA") or "auto").lower()
    if isa not in ISA_FLAGS:
        raise ValueError(f"SLIMKIT_NATIVE_ISA must be one of {sorted(ISA_FLAGS)}; got {isa!r}.")
    return isa


@contextlib.contextmanager
def use_isa(isa: str | None) -> Iterator[None]:
    """Within the block, packed layers use the ``isa`` build (``None``: back to ``$SLIMKIT_NATIVE_ISA``)."""
    if isa is not None and isa not in ISA_FLAGS:
        raise ValueError(f"isa must be one of {sorted(ISA_FLAGS)}; got {isa!r}.")
    saved = _STATE.get("isa")
    _STATE["isa"] = isa
    _STATE.pop("active", None)
    try:
        yield
    finally:
        _STATE["isa"] = saved
        _STATE.pop("active", None)


def _build(compiler: str, flags: tuple[str, ...] = FLAGS) -> Path:
    source = SOURCE.read_bytes()
    key = hashlib.sha256(b"\0".join([source, " ".join(flags).encode(), compiler.encode(),
                                     _cpu_signature().encode()])).hexdigest()[:16]
    target = cache_dir() / f"lowbit-{key}.so"
    if target.is_file():
        return target
    with atomic_file(target, suffix=".so") as tmp:  # another process never loads half a library
        done = subprocess.run([compiler, *flags, str(SOURCE), "-o", str(tmp)], capture_output=True, text=True,
                              timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-500:]}")
    return target


def _load(isa: str) -> ctypes.CDLL | None:
    if os.environ.get("SLIMKIT_NATIVE", "1") == "0":
        return None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None or platform.system() != "Linux":
        return None
    if not cpu_supports(isa):
        warnings.warn(f"SLIMKIT_NATIVE_ISA={isa}: this CPU lacks {', '.join(ISA_NEEDS[isa])}; packed layers use "
                      "the slower pure-torch path.", RuntimeWarning, stacklevel=3)
        return None
    try:
        lib = ctypes.CDLL(str(_build(compiler, ISA_FLAGS[isa])))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        warnings.warn(f"slimkit could not build its low-bit CPU kernel ({exc}); packed layers use the slower "
                      "pure-torch path. Set SLIMKIT_NATIVE=0 to silence this.", RuntimeWarning, stacklevel=3)
        return None
    lib.slimkit_lowbit_simd.restype = ctypes.c_int
    simd = lib.slimkit_lowbit_simd()
    if simd == 0:  # no AVX2: the plain-C build is slower than the torch path
        return None
    if isa != "auto" and _SIMD_NAMES.get(simd) != isa:
        warnings.warn(f"the {isa} build of the low-bit kernel reports {simd}-bit vectors; not used.",
                      RuntimeWarning, stacklevel=3)
        return None
    fn = lib.slimkit_lowbit_matmul
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn.argtypes = [ptr, i64, i64, ptr, i64, i64, ptr, ptr, i64, i64, ctypes.c_int, ptr, ptr, ctypes.c_int]
    fn.restype = ctypes.c_int
    deq = lib.slimkit_lowbit_dequantize_planar
    deq.argtypes = [ptr, i64, i64, ptr, ptr, i64, i64, ctypes.c_int, ptr, ctypes.c_int]
    deq.restype = ctypes.c_int
    return lib


def kernel(isa: str | None = None) -> ctypes.CDLL | None:
    """The loaded kernel library for ``isa``, built on first use; ``None`` when unavailable (see the module doc).

    Without ``isa``: the one :func:`requested_isa` names, looked up once (until :func:`use_isa` or a cleared state).
    Unavailable also means a CPU without AVX2, where the plain-C build is slower than the pure-torch path.
    """
    if isa is None:
        active = _STATE.get("active")
        if active is not None:
            return active[0]  # type: ignore[index]
        isa = requested_isa()
        _STATE["active"] = (kernel(isa),)
        return _STATE["active"][0]  # type: ignore[index]
    key = "lib" if isa == "auto" else f"lib-{isa}"
    if key not in _STATE:
        _STATE[key] = _load(isa)
    return _STATE[key]  # type: ignore[return-value]


def isa_name(isa: str | None = None) -> str:
    """The instruction set the kernel for ``isa`` really uses: ``avx512``, ``avx2`` or ``torch`` (no kernel)."""
    lib = kernel(isa)
    return "torch" if lib is None else _SIMD_NAMES.get(lib.slimkit_lowbit_simd(), "torch")


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


def _plan(layer: torch.nn.Module, lib: ctypes.CDLL) -> tuple | None:
    """The constant kernel arguments of a PackedLinear; ``None`` when its tensors do not fit the kernel.

    Checked once and kept on the layer while its buffers are the same objects and its bias the same storage
    (decode calls every layer once per token: per-call checks would cost more than the kernel on small layers).
    """
    buffers, bias = layer._buffers, layer._parameters.get("bias")
    qweight, scales, zeros = buffers["qweight"], buffers["scales"], buffers["zeros"]
    bias_ptr = None if bias is None else bias.data_ptr()
    plan = layer.kernel_cache.get("native")
    if (plan is not None and plan[0] is lib and plan[1] is qweight and plan[2] is scales and plan[3] is zeros
            and plan[4] is bias and plan[5] == bias_ptr):
        return plan[6]
    ok = (qweight.device.type == "cpu" and scales.dtype == torch.float16 and zeros.dtype == torch.float16
          and qweight.is_contiguous() and scales.is_contiguous() and zeros.is_contiguous()
          and (bias is None or (bias.dtype == torch.float32 and bias.is_contiguous())))
    args = ((qweight.data_ptr(), layer.out_features, qweight.shape[1], scales.data_ptr(), zeros.data_ptr(),
             scales.shape[1], layer.group_size, layer.bits, bias_ptr) if ok else None)
    layer.kernel_cache["native"] = (lib, qweight, scales, zeros, bias, bias_ptr, args)
    return args


def layer_matmul(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    """``layer(x)`` for a PackedLinear through :func:`matmul`'s kernel, its arguments prepared once (decode path).

    ``x`` is fp32 on CPU, ``[..., k]`` with at most :data:`MAX_ROWS` rows; the result has ``x``'s leading shape.
    ``None`` when the kernel does not apply.
    """
    lib = kernel()
    k = x.shape[-1]
    m = x.numel() // k if k else 0
    if lib is None or not 0 < m <= MAX_ROWS or x.requires_grad:
        return None
    args = _plan(layer, lib)
    if args is None:  # e.g. a bias in another dtype: the general entry converts per call
        out = matmul(x.reshape(m, k), layer.qweight, layer.scales, layer.zeros, layer.bits, layer.group_size,
                     layer.out_features, layer.bias)
        return None if out is None else out.view(*x.shape[:-1], layer.out_features)
    if not x.is_contiguous():
        x = x.contiguous()
    y = torch.empty((*x.shape[:-1], layer.out_features), dtype=torch.float32)
    threads = torch.get_num_threads() if m * k * layer.out_features >= PARALLEL_MIN_WEIGHTS else 1
    if lib.slimkit_lowbit_matmul(x.data_ptr(), m, k, *args, y.data_ptr(), threads):
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
