"""PackedLinear: a Linear layer whose weight is stored packed at 2/3/4/8 bits with per-group scales and zeros.

The weight of shape ``[out, in]`` is split along ``in`` into groups of ``group_size`` consecutive columns (the
last group may be shorter). Each (row, group) has a scale ``s`` and a zero point ``z`` (a float, so HQQ's
fractional zeros fit too); the dequantised weight is ``(q - z) * s``. Buffers (all in the state dict):

- ``qweight``: uint8 ``[out, packed_length(in, bits)]`` (layout in :mod:`.packing`),
- ``scales`` and ``zeros``: float16 ``[out, n_groups]``,
- ``input_scale`` (optional, AWQ where no preceding layer can absorb it): ``[in]``, multiplied into the input.

Nothing fp32 is cached on the CPU: ``forward`` dequantises on the fly, and decoding-size batches use fused kernels
that never build the scaled dense weight. On CUDA each row bucket runs the path measured fastest for the layer's
shape (int4 GEMV/GEMM kernels for decode and short inputs, the dequantised weight + one dense GEMM for prefill;
:mod:`.int4_dispatch`), with everything a call needs built once per layer in :attr:`PackedLinear.kernel_cache`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.engines.quantization.lowbit import kernels
from slimkit.engines.quantization.lowbit.packing import check_bits, pack, packed_length, unpack
from slimkit.errors import ConfigError

SCALE_DTYPE = torch.float16
#: smallest stored scale (2**-20 is exact in float16), so an all-zero group never divides by zero
SCALE_MIN = 2.0**-20


#: ``group_size`` value meaning one group per output row (per-channel), resolved per layer by :func:`row_groups`
PER_CHANNEL = -1


def row_groups(group_size: int, in_features: int) -> int:
    """The group size a layer of ``in_features`` inputs uses: ``group_size``, or the whole row for ``PER_CHANNEL``."""
    return in_features if group_size == PER_CHANNEL else group_size


def n_groups(in_features: int, group_size: int) -> int:
    """Number of column groups of ``group_size`` (the last one may be partial)."""
    return -(-in_features // group_size)


def dequantize_packed(qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, bits: int, group_size: int,
                      in_features: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(q - z) * s`` of one packed ``[out, bytes]`` weight as a dense ``[out, in]`` tensor (built on demand)."""
    out_f, groups = scales.shape
    q = unpack(qweight, bits, in_features)
    if in_features % group_size:
        q = F.pad(q, (0, groups * group_size - in_features))
    q = q.view(out_f, groups, group_size).to(dtype)
    s = scales.to(dtype).unsqueeze(-1)
    w = torch.addcmul(-zeros.to(dtype).unsqueeze(-1) * s, q, s)
    return w.view(out_f, groups * group_size)[:, :in_features]


class PackedLinear(nn.Module):
    """``y = x @ dequant(qweight)^T + bias`` with a weight stored at ``bits`` bits per value."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bits: int,
        group_size: int,
        bias: bool = True,
        input_scale: bool = False,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        check_bits(bits)
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ConfigError(f"group_size must be a positive int; got {group_size!r}.")
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.bits, self.group_size = int(bits), int(group_size)
        groups = n_groups(self.in_features, self.group_size)
        self.register_buffer(
            "qweight", torch.zeros(out_features, packed_length(in_features, bits), dtype=torch.uint8, device=device)
        )
        self.register_buffer("scales", torch.ones(out_features, groups, dtype=SCALE_DTYPE, device=device))
        self.register_buffer("zeros", torch.zeros(out_features, groups, dtype=SCALE_DTYPE, device=device))
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device), False) if bias else None
        if input_scale:
            self.register_buffer("input_scale", torch.ones(in_features, dtype=dtype, device=device))
        else:
            self.input_scale = None
        #: use a low-bit kernel when one fits the input (set False to force dequantise + dense matmul)
        self.use_kernel = True

    @classmethod
    def from_quantized(
        cls,
        q: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor,
        bits: int,
        group_size: int,
        bias: torch.Tensor | None = None,
        input_scale: torch.Tensor | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> PackedLinear:
        """Build from integer codes ``q [out, in]`` and per-group ``scales``/``zeros [out, n_groups]``.

        ``dtype`` is the float type of the bias and input scale (the model's dtype).
        """
        out_features, in_features = q.shape
        layer = cls(in_features, out_features, bits, group_size, bias is not None, input_scale is not None,
                    dtype=dtype, device=q.device)
        if tuple(scales.shape) != tuple(layer.scales.shape) or tuple(zeros.shape) != tuple(layer.zeros.shape):
            raise ConfigError(
                f"scales/zeros must have shape {tuple(layer.scales.shape)} for a [{out_features}, {in_features}] "
                f"weight with group_size={group_size}; got {tuple(scales.shape)} and {tuple(zeros.shape)}."
            )
        layer.qweight.copy_(pack(q, bits))
        layer.scales.copy_(scales)
        layer.zeros.copy_(zeros)
        if bias is not None:
            layer.bias.data.copy_(bias.detach())
        if input_scale is not None:
            layer.input_scale.copy_(input_scale)
        return layer

    def codes(self) -> torch.Tensor:
        """The integer codes ``q`` as uint8 ``[out, in]``."""
        return unpack(self.qweight, self.bits, self.in_features)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The weight ``(q - z) * s`` as a dense ``[out, in]`` tensor (built on demand, never cached)."""
        dtype = dtype or (self.bias.dtype if self.bias is not None else torch.float32)
        return dequantize_packed(self.qweight, self.scales, self.zeros, self.bits, self.group_size, self.in_features,
                                 dtype)

    #: ``{(input shape, dtype): (weight or None, call)}`` once the CUDA dispatch ran a shape (:meth:`direct_calls`)
    _direct: dict | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Dequantise on the fly (or run a packed kernel for small batches) and apply the layer."""
        direct = self._direct
        if direct is not None and self.use_kernel:
            entry = direct.get((x.shape, x.dtype))  # a CUDA input shape seen before: its path, nothing else
            if entry is not None:
                weight, call = entry
                if weight is not None:  # the kept dense weight: exactly nn.Linear's call
                    return F.linear(x, weight, call)
                if not x.requires_grad and x.is_contiguous():
                    return call(x)
        if self.input_scale is not None:
            x = x * self.input_scale.to(x.dtype)
        if self.use_kernel:
            out = kernels.packed_matmul(self, x)
            if out is not None:
                return out
        return F.linear(x, self.dequantize(x.dtype), None if self.bias is None else self.bias.to(x.dtype))

    def direct_calls(self) -> dict[tuple, tuple]:
        """The input shapes whose path :meth:`forward` runs itself: ``{(shape, dtype): (weight or None, call)}``.

        Filled by the CUDA dispatch (:func:`.int4_dispatch.matmul`) the first time it runs a shape: a kept dense
        weight is called as ``F.linear(x, weight, bias)`` (``call`` is then the bias), a packed kernel as
        ``call(x)`` for contiguous inputs without gradients. Dropped with :meth:`release_caches`.
        """
        direct = self.__dict__.get("_direct")
        if direct is None:
            direct = self.__dict__["_direct"] = {}
        return direct

    def call_macs(self, args: tuple, output: object) -> tuple[str, int]:
        """``("int<bits> weights", MACs)`` of one call (weight-only: activations stay float), for evaluation."""
        macs = output.numel() * self.in_features if isinstance(output, torch.Tensor) else 0
        return f"int{self.bits} weights", macs

    @property
    def kernel_cache(self) -> dict[str, Any]:
        """What the kernels built for this layer, by kernel; never copied or saved.

        CPU: the C kernel's call plan. CUDA: per-bucket plans and the state they use (int4 layouts, dense weight).
        """
        return self.__dict__.setdefault("_kernel_cache", {})

    def release_caches(self) -> None:
        """Drop :attr:`kernel_cache` and :meth:`direct_calls`; the next call rebuilds what it needs."""
        self.__dict__.pop("_kernel_cache", None)
        self.__dict__.pop("_direct", None)

    def _apply(self, fn: Any, recurse: bool = True) -> PackedLinear:
        """``.to()``/``.cuda()``/``.half()`` and the like: the kernels' state belongs to the old tensors, drop it."""
        self.release_caches()
        return super()._apply(fn, recurse)

    def __getstate__(self) -> dict:
        """The layer's state for copy/deepcopy, without the kernel cache (ctypes handles do not copy)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_kernel_cache", "_direct")}

    def extra_repr(self) -> str:
        """Shape, bit width and group size in ``print(model)``."""
        return (f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}, "
                f"group_size={self.group_size}, bias={self.bias is not None}, "
                f"input_scale={self.input_scale is not None}")

    def spec(self) -> dict[str, int | bool]:
        """JSON-able description from which :meth:`from_spec` rebuilds an empty layer of this shape."""
        return {"in_features": self.in_features, "out_features": self.out_features, "bits": self.bits,
                "group_size": self.group_size, "bias": self.bias is not None,
                "input_scale": self.input_scale is not None}

    @classmethod
    def from_spec(cls, spec: dict, dtype: torch.dtype = torch.float32,
                  device: torch.device | str | None = None) -> PackedLinear:
        """An empty layer (zeros) with the shapes of :meth:`spec`, ready for a strict state-dict load.

        A ``meta`` device (the layer replaced belongs to a skeleton built without weights) gives real CPU buffers.
        """
        if device is not None and torch.device(device).type == "meta":
            device = None
        return cls(int(spec["in_features"]), int(spec["out_features"]), int(spec["bits"]), int(spec["group_size"]),
                   bool(spec["bias"]), bool(spec.get("input_scale", False)), dtype=dtype, device=device)
