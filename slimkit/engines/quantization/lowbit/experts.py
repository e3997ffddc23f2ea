"""PackedExperts: a transformers MoE experts module with every expert stored packed at 2/3/4/8 bits.

Each projection keeps :class:`PackedLinear`'s format per expert, stacked along a leading expert dimension
(buffers, all in the state dict; ``<p>`` is the replaced module's parameter name, ``gate_up_proj`` or ``up_proj``,
and ``down_proj``):

- ``<p>_qweight``: uint8 ``[E, out, packed_length(in, bits)]`` (layout in :mod:`.packing`),
- ``<p>_scales`` and ``<p>_zeros``: float16 ``[E, out, n_groups]``,
- ``<p>_input_scale`` (optional, AWQ where no earlier weight absorbs it): ``[E, in]``, multiplied into the input.

Run time: for the tokens routed to expert ``e``, the fused C kernel of :mod:`.native` (up to ``native.MAX_ROWS``
tokens: decode) reads expert ``e``'s slice of the packed buffers in place (its address is the buffer's plus
``e`` strides; nothing is copied or dequantised); longer inputs go through the kernel's planar dequantisation
of that one expert for that call, as :class:`PackedLinear` does for prefill; without the kernel (no compiler,
another dtype or device) the expert is dequantised with torch for the call. Nothing fp32 is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.core.experts import ExpertsLayout
from slimkit.engines.quantization.experts import (
    DOWN,
    FIRST,
    QuantizedExperts,
    float_dtype,
    layout_from_spec,
    layout_spec,
    saved_experts,
)
from slimkit.engines.quantization.lowbit import native
from slimkit.engines.quantization.lowbit.linear import SCALE_DTYPE, dequantize_packed, n_groups
from slimkit.engines.quantization.lowbit.packing import check_bits, pack, packed_length, unpack
from slimkit.errors import ConfigError


class PackedExperts(QuantizedExperts):
    """Experts whose two projections are packed per expert (see the module doc); forward as the replaced module."""

    def __init__(self, layout: ExpertsLayout, act_fn: Callable, bits: int, group_size: int,
                 input_scale: tuple[str, ...] = (), dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> None:
        super().__init__(layout, act_fn)
        check_bits(bits)
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ConfigError(f"group_size must be a positive int; got {group_size!r}.")
        self.bits, self.group_size = int(bits), int(group_size)
        unknown = set(input_scale) - {FIRST, DOWN}
        if unknown:
            raise ConfigError(f"input_scale names projections {sorted(unknown)}; use 'first' and/or 'down'.")
        e = layout.num_experts
        for which, (out_f, in_f) in self.shapes().items():
            name = self.buffer_prefix(which)
            self.register_buffer(f"{name}_qweight", torch.zeros(e, out_f, packed_length(in_f, bits),
                                                                dtype=torch.uint8, device=device))
            groups = n_groups(in_f, group_size)
            self.register_buffer(f"{name}_scales", torch.ones(e, out_f, groups, dtype=SCALE_DTYPE, device=device))
            self.register_buffer(f"{name}_zeros", torch.zeros(e, out_f, groups, dtype=SCALE_DTYPE, device=device))
            if which in input_scale:
                self.register_buffer(f"{name}_input_scale", torch.ones(e, in_f, dtype=dtype, device=device))
        self.input_scale = tuple(w for w in (FIRST, DOWN) if w in input_scale)
        self.weight_dtype = dtype  #: the float dtype of the replaced weights (default of :meth:`dequantize`)
        #: experts quantized with RTN because calibration routed too few tokens to them (gptq/awq)
        self.rtn_fallback: list[int] = []
        #: use the C kernel when it fits the input (set False to force dequantise + dense matmul)
        self.use_kernel = True

    # ------------------------------------------------------------------------------------------- layout
    def packed(self, which: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(qweight, scales, zeros)`` of a projection, all experts."""
        p = self.buffer_prefix(which)
        return self._buffers[f"{p}_qweight"], self._buffers[f"{p}_scales"], self._buffers[f"{p}_zeros"]

    def input_scale_of(self, which: str) -> torch.Tensor | None:
        """The ``[E, in]`` input scale of a projection, or None."""
        return self._buffers.get(f"{self.buffer_prefix(which)}_input_scale")

    # ------------------------------------------------------------------------------------------- filling
    @torch.no_grad()
    def set_expert(self, which: str, e: int, q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
                   input_scale: torch.Tensor | None = None) -> None:
        """Store expert ``e``'s codes ``q [out, in]`` (uint8) and per-group ``scales``/``zeros`` for ``which``."""
        qweight, s, z = self.packed(which)
        out_f, in_f = self.shapes()[which]
        if tuple(q.shape) != (out_f, in_f) or tuple(scales.shape) != tuple(s.shape[1:]) \
                or tuple(zeros.shape) != tuple(z.shape[1:]):
            raise ConfigError(
                f"expert {e} {which}: codes {tuple(q.shape)}, scales {tuple(scales.shape)}, zeros {tuple(zeros.shape)}"
                f" do not fit [{out_f}, {in_f}] with group_size={self.group_size}.")
        qweight[e].copy_(pack(q, self.bits))
        s[e].copy_(scales)
        z[e].copy_(zeros)
        if input_scale is not None:
            target = self.input_scale_of(which)
            if target is None:
                raise ConfigError(f"This PackedExperts has no input scale for {which!r}.")
            target[e].copy_(input_scale)

    def codes(self, which: str, e: int | None = None) -> torch.Tensor:
        """Expert ``e``'s integer codes of ``which`` as uint8 ``[out, in]`` (every expert's, ``[E, out, in]``)."""
        qweight = self.packed(which)[0]
        return unpack(qweight if e is None else qweight[e], self.bits, self.shapes()[which][1])

    def dequantize(self, which: str, e: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Expert ``e``'s weight of ``which`` as a dense ``[out, in]`` tensor (input scale not applied)."""
        qweight, s, z = self.packed(which)
        dtype = dtype or self.weight_dtype
        return dequantize_packed(qweight[e], s[e], z[e], self.bits, self.group_size, self.shapes()[which][1], dtype)

    # ------------------------------------------------------------------------------------------- compute
    def project(self, expert: int, which: str, x: torch.Tensor) -> torch.Tensor:
        """``x @ W_e^T`` for one expert's projection: C kernel on the packed slice, else dequantise (module doc)."""
        scale = self.input_scale_of(which)
        if scale is not None:
            x = x * scale[expert].to(x.dtype)
        if self.use_kernel and x.dtype == torch.float32 and x.device.type == "cpu" and not x.requires_grad:
            out = self._kernel(expert, which, x)
            if out is not None:
                return out
        return F.linear(x, self.dequantize(which, expert, x.dtype))

    def _plan(self, lib: Any) -> dict[str, tuple] | None:
        """Base addresses and per-expert strides of the packed buffers (kept while the buffers are the same)."""
        buffers = tuple(t for w in (FIRST, DOWN) for t in self.packed(w))
        plan = self.__dict__.get("_native_plan")
        if plan is not None and plan[0] is lib and len(plan[1]) == len(buffers) \
                and all(a is b for a, b in zip(plan[1], buffers, strict=True)):
            return plan[2]
        ok = all(t.device.type == "cpu" and t.is_contiguous() for t in buffers) and all(
            self.packed(w)[i].dtype == SCALE_DTYPE for w in (FIRST, DOWN) for i in (1, 2))
        args = None
        if ok:
            args = {}
            for which in (FIRST, DOWN):
                q, s, z = self.packed(which)
                args[which] = (q.data_ptr(), q.stride(0), s.data_ptr(), z.data_ptr(), 2 * s.stride(0),
                               q.shape[1], q.shape[2], s.shape[2])
        self.__dict__["_native_plan"] = (lib, buffers, args)
        return args

    def _kernel(self, e: int, which: str, x: torch.Tensor) -> torch.Tensor | None:
        lib = native.kernel()
        if lib is None:
            return None
        m, k = x.shape
        if m == 0:
            return None
        if m > native.MAX_ROWS:  # prefill: dequantise this expert (planar, C) for the call, one dense matmul
            q, s, z = self.packed(which)
            return native.planar_matmul(x, q[e], s[e], z[e], self.bits, self.group_size, k, None)
        plan = self._plan(lib)
        if plan is None:
            return None
        q_ptr, q_stride, s_ptr, z_ptr, sz_stride, n, row_bytes, groups = plan[which]
        x = x.contiguous()
        y = torch.empty(m, n, dtype=torch.float32)
        threads = torch.get_num_threads() if m * k * n >= native.PARALLEL_MIN_WEIGHTS else 1
        code = lib.slimkit_lowbit_matmul(x.data_ptr(), m, k, q_ptr + e * q_stride, n, row_bytes,
                                         s_ptr + e * sz_stride, z_ptr + e * sz_stride, groups, self.group_size,
                                         self.bits, None, y.data_ptr(), threads)
        return None if code else y

    def release_caches(self) -> None:
        """Drop the kernel plan cached on the module; the next call rebuilds it."""
        self.__dict__.pop("_native_plan", None)

    def __getstate__(self) -> dict[str, Any]:
        """The module's state for copy/deepcopy, without the cached kernel plan (ctypes handles do not copy)."""
        return {k: v for k, v in self.__dict__.items() if k != "_native_plan"}

    def macs_label(self) -> str:
        """Weight-only: ``"int<bits> weights"`` (the activations stay float)."""
        return f"int{self.bits} weights"

    def extra_repr(self) -> str:
        """Experts, widths, bits and group size in ``print(model)``."""
        return (f"{super().extra_repr()}, bits={self.bits}, group_size={self.group_size}, "
                f"input_scale={list(self.input_scale)}")

    # ------------------------------------------------------------------------------------------- replay
    def spec(self) -> dict[str, Any]:
        """JSON-able description from which :meth:`from_spec` rebuilds an empty module of this shape."""
        spec = {**layout_spec(self.layout), "bits": self.bits, "group_size": self.group_size,
                "input_scale": list(self.input_scale)}
        if self.rtn_fallback:
            spec["rtn_fallback"] = list(self.rtn_fallback)
        return spec

    @classmethod
    def from_spec(cls, spec: dict[str, Any], act_fn: Callable, dtype: torch.dtype = torch.float32,
                  device: torch.device | str | None = None) -> PackedExperts:
        """An empty module (zeros) with the shapes of :meth:`spec`, ready for a strict state-dict load.

        A ``meta`` device (a skeleton built without weights) gives real CPU buffers.
        """
        if device is not None and torch.device(device).type == "meta":
            device = None
        module = cls(layout_from_spec(spec), act_fn, int(spec["bits"]), int(spec["group_size"]),
                     tuple(spec.get("input_scale", ())), dtype=dtype, device=device)
        module.rtn_fallback = [int(e) for e in spec.get("rtn_fallback", [])]
        return module


def packed_like(module: nn.Module, layout: ExpertsLayout, bits: int, group_size: int,
                input_scale: tuple[str, ...] = ()) -> PackedExperts:
    """An empty :class:`PackedExperts` for the experts module ``module`` (its act_fn, dtype and device)."""
    first = getattr(module, layout.first)
    device = None if first.device.type == "meta" else first.device
    return PackedExperts(layout, module.act_fn, bits, group_size, input_scale, dtype=float_dtype(module),
                         device=device)


def replay_experts(model: nn.Module, specs: dict[str, dict]) -> nn.Module:
    """Swap each named experts module for an EMPTY PackedExperts of the recorded shape (specs of other kinds skipped).

    Used on load (a meta skeleton is fine): the saved packed buffers then load strictly into these modules.
    """
    for name, spec, old in saved_experts(model, specs):
        model.set_submodule(name, PackedExperts.from_spec(spec, old.act_fn, dtype=float_dtype(old)))
    return model
