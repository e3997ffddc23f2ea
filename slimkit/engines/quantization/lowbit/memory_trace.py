"""Live tensor bytes on any device, their peak and the code lines that allocated them (a diagnostic for tests).

CUDA reports its peak (``torch.cuda.max_memory_allocated``); the CPU has no such counter, and CI has no GPU. A
:class:`LiveBytes` block sees every tensor an ATen op returns (a ``TorchDispatchMode``): a storage it has not seen
is an allocation, charged to the first frame of the calling code outside torch and this module; weak references
tell when a storage is freed. The peak is taken right after each allocation (only there can it grow), so it is
exact for what passes through ATen ops. Not seen: buffers a kernel allocates inside itself (cuSOLVER's working
copies, LAPACK's work arrays), memory made by numpy or other libraries. For the kernels that matter on CUDA the
internal copies can be charged by name (``internal``; :data:`CUDA_INTERNAL` lists what torch's CUDA linear algebra
allocates inside ``cholesky_inverse``).

:func:`cuda_paths` makes a CPU run take the branches the CUDA run takes where they differ in memory (the torch
inverse-Hessian factor instead of LAPACK in place, the gathered row permutation, the int4 dispatcher of
:class:`~.linear.PackedLinear` with its dense-weight cache), so the GPU path's working set is measured on a CPU.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_leaves

_TORCH = str(Path(torch.__file__).parent)
_HERE = __file__

#: bytes a CUDA op allocates inside itself, by op: ``cholesky_inverse`` (cuSOLVER ``potrs``) clones its input into
#: the result and into a second column-major working copy, one matrix more than its output
CUDA_INTERNAL: dict[object, Callable[[tuple], int]] = {
    torch.ops.aten.cholesky_inverse.default: lambda args: args[0].numel() * args[0].element_size(),
}


@dataclass
class Peak:
    """The largest live total seen, and what was alive then: ``{code line: bytes}``."""

    bytes: int = 0
    by_line: dict[str, int] = field(default_factory=dict)

    def top(self, n: int = 8) -> list[tuple[str, int]]:
        """The ``n`` code lines holding the most bytes at the peak."""
        return sorted(self.by_line.items(), key=lambda kv: -kv[1])[:n]


class LiveBytes(TorchDispatchMode):
    """Count live tensor storages (module doc); ``with LiveBytes(existing) as live: ...; live.peak.bytes``.

    ``existing`` tensors (a model's parameters) are counted from the start, charged to ``"before"``, and stop
    counting once freed (a weight replaced by a packed one). ``internal`` charges op-internal buffers (bytes of
    one call, alive only during it) by op overload, e.g. :data:`CUDA_INTERNAL`.
    """

    def __init__(self, existing: Iterable[torch.Tensor] = (), internal: dict | None = None) -> None:
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int, str]] = {}
        self.internal = dict(internal or {})
        self.current = 0
        self.allocations = 0
        self.peak = Peak()
        for t in existing:
            self._track(t, "before")
        self.allocations = 0  #: storages allocated inside the block (the existing ones not counted)
        self._update_peak(0, "")

    def _track(self, t: torch.Tensor, where: str) -> bool:
        if t.device.type == "meta" or not t.layout == torch.strided:
            return False
        storage = t.untyped_storage()
        key = storage._cdata
        entry = self._live.get(key)
        if entry is not None and not entry[0].expired():
            return False  # in place, or a view of a storage already counted
        self._sweep()
        size = storage.nbytes()
        self._live[key] = (StorageWeakRef(storage), size, where)
        self.current += size
        self.allocations += 1
        return True

    def _sweep(self) -> None:
        for key in [k for k, (ref, _, _) in self._live.items() if ref.expired()]:
            self.current -= self._live.pop(key)[1]

    def _update_peak(self, extra: int, where: str) -> None:
        """Take ``current + extra`` as the peak if it is one (``current`` must be swept: exact)."""
        if self.current + extra <= self.peak.bytes and self.peak.by_line:
            return
        by_line: dict[str, int] = {}
        for _, size, line in self._live.values():
            by_line[line] = by_line.get(line, 0) + size
        if extra:
            by_line[f"{where} (inside the op)"] = by_line.get(f"{where} (inside the op)", 0) + extra
        self.peak = Peak(self.current + extra, by_line)

    def live_bytes(self) -> int:
        """Bytes alive now (after dropping what was freed)."""
        self._sweep()
        return self.current

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: D105
        out = func(*args, **(kwargs or {}))
        inside = self.internal.get(func)
        where = None
        grew = False
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                if where is None:
                    where = _caller()
                grew = self._track(t, where) or grew
        if inside is not None:
            self._sweep()  # what was freed since the last allocation must not count here
            self._update_peak(inside(args), where or _caller())
        elif grew:
            self._update_peak(0, where)
        return out


def _caller() -> str:
    """``file:line (function)`` of the innermost frame outside torch and this module."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TORCH) and name != _HERE and "/contextlib.py" not in name:
            return f"{Path(name).name}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back
    return "?"


@contextlib.contextmanager
def cuda_paths() -> Iterator[None]:
    """On the CPU, take the branches a CUDA run takes where they hold different memory (module doc).

    The int4 dispatcher's timings are replaced by the outcome measured on an H200 for prefill-sized inputs (the
    dense path wins), with a fresh table of decisions restored on exit. GPTQ's column sweep runs outside any
    dispatch mode, as the fused CUDA kernel allocates nothing (the CPU loop's one-column temporaries are not
    counted, and a per-op Python hook would make it several times slower).
    """
    from slimkit.engines.quantization.lowbit import autotune, gptq, int4_dispatch, kernels

    saved = gptq.factor_in_place, kernels.packed_matmul, int4_dispatch.CHOOSER, gptq.sweep_columns
    sweep = gptq.sweep_columns

    def unobserved_sweep(*args) -> None:
        with _disable_current_modes():
            sweep(*args)

    gptq.factor_in_place = lambda h: False
    kernels.packed_matmul = lambda layer, x: int4_dispatch.matmul(layer, x)
    int4_dispatch.CHOOSER = autotune.Chooser(lambda name, fn: 0.0 if name == "dense" else 1.0)
    gptq.sweep_columns = unobserved_sweep
    try:
        yield
    finally:
        gptq.factor_in_place, kernels.packed_matmul, int4_dispatch.CHOOSER, gptq.sweep_columns = saved


def tensors_of(module: torch.nn.Module) -> list[torch.Tensor]:
    """Every parameter and buffer of ``module`` (what :class:`LiveBytes` counts as existing)."""
    return [*module.parameters(), *module.buffers()]
