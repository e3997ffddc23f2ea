"""Which matmul a :class:`PackedLinear` call runs on CUDA: measured per layer shape and row bucket, once per process.

Candidates, each ``x @ W^T + b`` from the same packed weight:

- ``dense``: the dequantised weight and one dense GEMM (cuBLAS). Prefill-sized inputs are compute-bound, where
  nothing beats the dense GEMM, so this is also the floor that makes int4 never slower than the dense layer.
- ``tinygemm``: PyTorch's int4 kernel (:mod:`.tinygemm`), for buckets up to :data:`MAX_TINYGEMM_BUCKET` rows.
- ``gemv*`` (1 to 8 rows) and ``gemm*`` (2 to :data:`MAX_GEMM_BUCKET` rows, float16/bfloat16): our Triton kernels
  (:mod:`.triton_int4`) with a few tile configurations each.

The first call of a layer shape, dtype and row bucket (:func:`.autotune.row_bucket`) on a device builds every
candidate, drops any whose output disagrees with the dequantised weight, times the rest with CUDA events
(:data:`CHOOSER`) and remembers the fastest for every layer of that shape; each layer then keeps a per-bucket plan,
a closure over buffers built once (no dtype cast, ``.contiguous()`` or copying reshape per call when the input is
already the layer's dtype and contiguous). State a layer's plans do not use is freed after the choice.

Memory of ``dense`` (``SLIMKIT_INT4_DENSE``): ``auto`` (default) keeps the dequantised weight once built, as long
as :data:`DENSE_FREE_FRACTION` of the GPU's memory stays free after it (a layer of the 8B-class model adds 2 bytes
per weight to its 0.5, and only where the dense GEMM won, i.e. prefill sizes); past that, and always with
``per_call``, it dequantises on every call (no memory, slower prefill); ``cache`` always keeps it.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from slimkit.engines.quantization.lowbit import tinygemm, triton_gemm, triton_int4
from slimkit.engines.quantization.lowbit.autotune import Chooser, cuda_event_timer, row_bucket
from slimkit.engines.quantization.lowbit.protocol import PackedLayer

#: largest row bucket for which tinygemm is a candidate (it falls far behind dense GEMMs above)
MAX_TINYGEMM_BUCKET = 128
#: largest row bucket for which the Triton GEMM is a candidate
MAX_GEMM_BUCKET = 512
#: relative max error (to the largest output) above which a candidate is dropped as wrong
TOLERANCE = 0.05
#: ``auto`` keeps a dense weight only while this fraction of the GPU's memory stays free after it
DENSE_FREE_FRACTION = 0.2
#: input shapes per layer whose call :class:`PackedLinear` makes directly (its ``direct_calls()``: decode and
#: repeated prefill shapes skip the dispatch, as lean as ``nn.Linear``); new shapes past this go through the plans
MAX_CALLS = 64
#: the process-wide decisions for CUDA calls
CHOOSER = Chooser(cuda_event_timer)
_HALF = (torch.float16, torch.bfloat16)
_FAMILIES = ("dense", "tinygemm", "triton")

Matmul = Callable[[torch.Tensor], torch.Tensor]


def family(name: str) -> str:
    """The state a candidate uses: ``dense``, ``tinygemm`` or ``triton`` (``gemv_*``/``gemm_*``)."""
    return name if name in ("dense", "tinygemm") else "triton"


def dense_policy() -> str:
    """``SLIMKIT_INT4_DENSE``: ``auto``, ``cache`` or ``per_call`` (see the module doc)."""
    policy = os.environ.get("SLIMKIT_INT4_DENSE", "auto")
    if policy not in ("auto", "cache", "per_call"):
        raise ValueError(f"SLIMKIT_INT4_DENSE={policy!r}; use auto, cache or per_call.")
    return policy


def _keep_dense(weight: torch.Tensor) -> bool:
    policy = dense_policy()
    if policy != "auto" or weight.device.type != "cuda":
        return policy != "per_call"
    free, total = torch.cuda.mem_get_info(weight.device)
    return free >= DENSE_FREE_FRACTION * total  # the weight is already allocated here


class DenseMatmul:
    """``F.linear(x, weight, bias)`` with the dequantised weight kept.

    The dense path's call, and what :class:`PackedLinear` calls directly for an input shape seen before
    (``F.linear`` takes any leading dims).
    """

    __slots__ = ("bias", "weight")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight, self.bias = weight, bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ weight^T + bias``."""
        return F.linear(x, self.weight, self.bias)


def _dense(layer: PackedLayer, dtype: torch.dtype) -> Matmul:
    bias = None if layer.bias is None else layer.bias.detach().to(dtype)
    weight = layer.dequantize(dtype)
    if _keep_dense(weight):
        return DenseMatmul(weight, bias)
    del weight
    return lambda x: F.linear(x, layer.dequantize(dtype), bias)


def _triton_weight(layer: PackedLayer) -> triton_int4.TritonWeight:
    cache = layer.kernel_cache
    if ("triton",) not in cache:
        cache[("triton",)] = triton_int4.prepare(layer.codes(), layer.scales, layer.zeros, layer.group_size,
                                                 layer.bias)
    return cache[("triton",)]


def _cached(layer: PackedLayer, key: tuple, build: Callable[[], Matmul | None]) -> Matmul | None:
    cache = layer.kernel_cache
    if key not in cache:
        cache[key] = build()
    return cache[key]


def candidates(layer: PackedLayer, dtype: torch.dtype, bucket: int,
               use_triton: bool | None = None) -> dict[str, Callable[[], Matmul | None]]:
    """``name -> builder`` of every path that can run this layer for activations of ``dtype`` in ``bucket`` rows.

    A builder returns the per-call function (state built once and kept in ``layer.kernel_cache``) or ``None``
    when the path turns out not to work here. ``use_triton`` defaults to "the layer is on a CUDA device" (tests
    pass ``True`` to run the kernels through Triton's interpreter on a CPU).
    """
    device = layer.qweight.device
    out: dict[str, Callable[[], Matmul | None]] = {
        "dense": lambda: _cached(layer, ("dense", dtype), lambda: _dense(layer, dtype))}
    if bucket <= MAX_TINYGEMM_BUCKET and tinygemm.applies(layer, device):
        out["tinygemm"] = lambda: _cached(layer, ("tinygemm", dtype), lambda: tinygemm.build(layer, dtype))
    use_triton = device.type == "cuda" if use_triton is None else use_triton
    if not (use_triton and triton_int4.AVAILABLE and layer.bits <= 4
            and triton_int4.kernel_group(layer.group_size) is not None):
        return out
    if bucket <= triton_int4.MAX_GEMV_ROWS:
        for cfg in triton_int4.gemv_configs(bucket):
            out[cfg.name] = functools.partial(_triton_call, layer, triton_int4.gemv_fn, cfg)
    if 1 < bucket <= MAX_GEMM_BUCKET and dtype in _HALF:
        for cfg in triton_gemm.gemm_configs(bucket):
            out[cfg.name] = functools.partial(_triton_call, layer, triton_gemm.gemm_fn, cfg)
    return out


def _triton_call(layer: PackedLayer, make: Callable, cfg: object) -> Matmul:
    return make(_triton_weight(layer), cfg)


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def decision_key(layer: PackedLayer, dtype: torch.dtype, bucket: int) -> tuple:
    """What a decision depends on: device model, layer shape and format, activation dtype, row bucket."""
    return (_device_name(layer.qweight.device), layer.in_features, layer.out_features, layer.group_size,
            layer.bits <= 4, layer.bias is not None, dtype, bucket)


def _verified(layer: PackedLayer, probe: torch.Tensor,
              builders: dict[str, Callable[[], Matmul | None]]) -> dict[str, Matmul]:
    """Build each candidate and keep those that reproduce the dequantised layer on ``probe``."""
    reference = F.linear(probe.float(), layer.dequantize(torch.float32),
                         None if layer.bias is None else layer.bias.float())
    scale = reference.abs().max().clamp(min=1e-6)
    good = {}
    for name, build in builders.items():
        try:
            fn = build()
            err = None if fn is None else float((fn(probe).float() - reference).abs().max() / scale)
        except Exception as exc:  # noqa: BLE001 - any failure to compile or run a candidate (Triton's compile and
            fn, err = None, repr(exc)  # out-of-resources errors are not RuntimeErrors) only drops that candidate
        if isinstance(err, float) and err < TOLERANCE:
            good[name] = fn
        elif name != "dense":
            reason = f"error {err}" if isinstance(err, float) else err or "unavailable"
            warnings.warn(f"PackedLinear({layer.extra_repr()}): int4 path {name} dropped ({reason}).",
                          RuntimeWarning, stacklevel=4)
    return good


def plan(layer: PackedLayer, x: torch.Tensor, chooser: Chooser | None = None,
         use_triton: bool | None = None) -> tuple[str, Matmul] | None:
    """``(name, fn)``: the measured-fastest path for inputs shaped like ``x``.

    ``fn`` takes and returns the input's shape. ``None`` while a CUDA graph is being captured: call the layer
    once outside the capture with the same row bucket first.
    """
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        return None  # inside a capture kernels are recorded, not run: building state or timing would read garbage
    chooser = CHOOSER if chooser is None else chooser
    k, n = layer.in_features, layer.out_features
    bucket = row_bucket(x.numel() // max(k, 1))
    builders = candidates(layer, x.dtype, bucket, use_triton)
    key = decision_key(layer, x.dtype, bucket)
    if key not in chooser.decisions and len(builders) == 1:  # prefill-sized: only the dense path, nothing to time
        chooser.choose(key, dict.fromkeys(builders, lambda: None))
    elif key not in chooser.decisions:
        probe = torch.randn(bucket, k, device=x.device).to(x.dtype)
        fns = _verified(layer, probe, builders)
        chooser.choose(key, {name: functools.partial(fn, probe) for name, fn in fns.items()})
    name = chooser.decisions[key]
    fn = builders[name]() if name in builders else None
    if fn is None:  # a path that won on another layer of this shape but is not available here
        name, fn = "dense", builders["dense"]()
    plans = layer.kernel_cache.setdefault("plans", {})
    used = {family(p[0]) for p in plans.values()} | {family(name)}
    for stale in [c for c in layer.kernel_cache if isinstance(c, tuple) and c[0] in _FAMILIES and c[0] not in used]:
        del layer.kernel_cache[stale]
    return name, _wrap(fn, k, n)


def _wrap(fn: Matmul, k: int, n: int) -> Matmul:
    def run(x: torch.Tensor) -> torch.Tensor:
        flat = x if x.dim() == 2 else x.reshape(-1, k)
        y = fn(flat if flat.is_contiguous() else flat.contiguous())
        return y if x.dim() == 2 else y.view(*x.shape[:-1], n)

    run.raw = fn  # type: ignore[attr-defined]
    return run


def _shaped(fn: Matmul, shape: torch.Size, n: int) -> Matmul:
    """``fn`` for contiguous inputs of exactly ``shape``: 2-D as it is, else one view in and one view out."""
    if len(shape) == 2:
        return fn
    rows, out_shape = shape.numel() // shape[-1], (*shape[:-1], n)
    return lambda x: fn(x.view(rows, shape[-1])).view(out_shape)


def direct_entry(fn: Matmul, shape: torch.Size, n: int) -> tuple[torch.Tensor | None, object]:
    """What :class:`PackedLinear` keeps for inputs of ``shape`` (see :meth:`PackedLayer.direct_calls`).

    ``(weight, bias)`` for a kept dense weight: the layer calls ``F.linear(x, weight, bias)`` itself, for any
    input of that shape and dtype (strided or needing gradients too), nothing else per call. ``(None, call)``
    for a packed kernel: ``call(x)`` for contiguous inputs without gradients, one view in and out for 3-D ones.
    """
    if isinstance(fn, DenseMatmul):
        return fn.weight, fn.bias
    return None, _shaped(fn, shape, n)


def matmul(layer: PackedLayer, x: torch.Tensor) -> torch.Tensor | None:
    """``x @ W^T + b`` through the layer's plan for this row bucket (measured on first use).

    ``None`` when the caller should dequantise: gradients wanted, empty input, or a graph capture before the layer
    ran this row bucket outside it. The path taken is also recorded in the layer's direct calls (for its first
    :data:`MAX_CALLS` input shapes), which the layer's forward then runs without coming here.
    """
    numel = x.numel()
    if x.requires_grad or not numel:
        return None
    cache = layer.kernel_cache
    plans = cache.get("plans")
    if plans is None:
        plans = cache["plans"] = {}
    pkey = (row_bucket(numel // x.shape[-1]), x.dtype, x.get_device())
    entry = plans.get(pkey)
    if entry is None:
        entry = plan(layer, x)
        if entry is None:
            return None
        plans[pkey] = entry
    if layer.input_scale is None and x.is_contiguous():
        calls = layer.direct_calls()
        if len(calls) < MAX_CALLS:
            calls[(x.shape, x.dtype)] = direct_entry(entry[1].raw, x.shape, layer.out_features)
    return entry[1](x)
