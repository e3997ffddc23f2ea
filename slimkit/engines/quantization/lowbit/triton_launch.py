"""Launch a Triton kernel whose grid and non-tensor arguments never change, without Triton's per-call binding.

A decode step calls each layer's GEMV once per token, and Triton's launch path (bind every argument, compute its
specialisation, look the compiled kernel up, check globals) costs several microseconds of Python per call, as much
as the kernel itself on a 4096 x 4096 layer. :class:`DirectLaunch` launches through Triton once, keeps the compiled
kernel, and from then on calls its launcher directly with the same arguments Triton would pass.

Safety, since the direct call skips Triton's checks: it is used only while every tensor argument is 16-byte aligned
(the specialisation the kernel was compiled for), on the device it was compiled for, with no launch hooks set; the
first direct launch is checked against a normal launch on the same inputs and a mismatch or any error turns the
direct path off for good. Under Triton's interpreter (no compiled kernel) every call is a normal launch.
"""

from __future__ import annotations

from typing import Any

import torch

try:
    from triton import knobs
    from triton.runtime import driver
except ImportError:  # pragma: no cover - depends on the install
    knobs = driver = None

_ALIGN = 16


def _no_hooks() -> bool:
    """No launch hook is set (a profiler's): Triton 3.6 keeps them as (empty) chains, older ones as None."""
    rt = knobs.runtime
    return all(h is None or not getattr(h, "calls", True) for h in (rt.launch_enter_hook, rt.launch_exit_hook))


def _capturing(args: tuple) -> bool:
    """A CUDA graph is being captured (the self-check compares results, which a capture cannot do)."""
    return any(isinstance(a, torch.Tensor) and a.is_cuda for a in args) and torch.cuda.is_current_stream_capturing()


class DirectLaunch:
    """``launch(*args)``: ``kernel[grid](*args, **constexprs, **options)``, direct after the first compiled call.

    Every argument except those at the ``varying`` indices must be the same object on every call (the layer's
    weights, its shape); the direct launch passes them as the raw pointers and values taken once, and reads only the
    varying tensors' pointers per call. ``out`` is the index of the tensor the kernel writes (restored between the
    two launches of the self-check; the kernel may accumulate into it).
    """

    def __init__(self, kernel: Any, grid: tuple[int, ...], constexprs: dict[str, Any], options: dict[str, Any],
                 varying: tuple[int, ...], out: int) -> None:
        self.kernel, self.constexprs, self.options = kernel, constexprs, options
        self.varying, self.out = varying, out
        self.grid = (tuple(grid) + (1, 1))[:3]
        self.compiled: Any = None
        self.template: list[Any] = []
        self.device = -1
        self.state = "new"  # new -> check (compiled, first direct launch verifies) -> fast | off

    def __call__(self, *args: Any) -> None:
        """Launch on ``args`` (the kernel's runtime arguments in order)."""
        if self.state == "fast":
            ptrs = [args[i].data_ptr() for i in self.varying]
            if all(p % _ALIGN == 0 for p in ptrs) and _no_hooks():
                try:
                    self._direct(ptrs)
                    return
                except Exception:  # noqa: BLE001 - a Triton whose launcher differs: normal launches from now on
                    self.state = "off"
        elif self.state == "check" and self._aligned(args) and _no_hooks() and not _capturing(args):
            self._check(args)
            return
        compiled = self.kernel[self.grid](*args, **self.constexprs, **self.options)
        if self.state == "new" and compiled is not None and hasattr(compiled, "packed_metadata") \
                and self._aligned(args):
            self.compiled, self.state = compiled, "check"
            self.device = next(a for a in args if isinstance(a, torch.Tensor)).get_device()
            self.template = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
            self.template += list(self.constexprs.values())

    @staticmethod
    def _aligned(args: tuple) -> bool:
        return all(a.data_ptr() % _ALIGN == 0 for a in args if isinstance(a, torch.Tensor))

    def _direct(self, ptrs: list[int]) -> None:
        values = self.template.copy()
        for i, p in zip(self.varying, ptrs, strict=True):
            values[i] = p
        c = self.compiled
        c.run(*self.grid, driver.active.get_current_stream(self.device), c.function, c.packed_metadata, None, None,
              None, *values)

    def _check(self, args: tuple) -> None:
        out = args[self.out]
        before = out.clone()
        try:
            self._direct([args[i].data_ptr() for i in self.varying])
            direct = out.clone()
        except Exception:  # noqa: BLE001 - see __call__
            direct = None
        out.copy_(before)
        self.kernel[self.grid](*args, **self.constexprs, **self.options)
        same = direct is not None and torch.allclose(direct.float(), out.float(), rtol=1e-3, atol=1e-5)
        self.state = "fast" if same else "off"
