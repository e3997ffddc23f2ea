"""How channel ids flow through torch functions called between layers.

Each traced activation has a *shadow*: an int64 tensor of the same shape holding, at every position, the
id of the channel it belongs to (-1 when no prunable layer produced it). Shape ops (view, permute, cat,
indexing...) are replayed on the shadow itself, so channel offsets after a concatenation or the
channel -> feature mapping of a flatten come out exact. Elementwise ops merge the ids they combine
(a residual add ties its operands' channels). Ops whose result would change when channels disappear
(softmax over channels, a split at a fixed channel offset, an unknown function) pin the ids: they are
kept, and a mask that wants them removed raises :class:`UnsupportedOpError` naming the op.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_map

from .graph import Tracer, channel_vector, compact, ids_along, tensors_in, varying_dims
from .ops_math import ALONG_DIM, MATMUL, REDUCE, linear, matmul, prelu, reduce, sdpa

ELEMENTWISE = set(
    """relu relu_ relu6 hardtanh hardtanh_ gelu silu silu_ sigmoid sigmoid_ tanh tanh_ hardswish hardswish_
    hardsigmoid leaky_relu leaky_relu_ elu elu_ selu celu mish softplus softsign logsigmoid glu_ dropout
    dropout_ dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout neg abs exp log log1p sqrt
    rsqrt square pow clamp clamp_ clip clip_ sign erf sin cos reciprocal nan_to_num float_power
    add add_ __add__ __radd__ __iadd__ sub sub_ __sub__ __rsub__ __isub__ mul mul_ __mul__ __rmul__ __imul__
    div div_ __truediv__ __rtruediv__ __itruediv__ true_divide maximum minimum where masked_fill
    masked_fill_ lerp eq ne gt lt ge le __eq__ __ne__ __gt__ __lt__ __ge__ __le__ isnan isinf
    """.split()
)
ADDS = {"add", "add_", "__add__", "__radd__", "__iadd__", "sub", "sub_", "__sub__", "__rsub__", "__isub__"}
FIRST_ONLY = {"to", "type_as", "type", "float", "half", "double", "bfloat16", "cpu", "cuda", "detach",
              "detach_", "clone", "contiguous", "data", "requires_grad_", "__get__"}
RESHAPE = {"view", "reshape", "flatten", "unflatten", "view_as", "reshape_as", "squeeze", "unsqueeze",
           "squeeze_", "unsqueeze_", "ravel"}
REPLAY = {"permute", "transpose", "transpose_", "t", "movedim", "moveaxis", "swapaxes", "swapdims", "T",
          "mT", "expand", "expand_as", "repeat", "broadcast_to", "flip"}
SELECT = {"__getitem__", "narrow", "select", "index_select", "split", "chunk", "unbind", "tensor_split",
          "split_with_sizes"}
SPATIAL = {f"{p}{n}d" for p in ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "lp_pool")
           for n in (1, 2, 3)} | {"interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "pad",
                                  "max_pool2d_with_indices", "adaptive_max_pool2d_with_indices"}
def op_name(func: Any) -> str:
    """A readable name for a torch function, including property getters such as ``Tensor.T``."""
    name = getattr(func, "__name__", repr(func))
    if name == "__get__":
        return getattr(getattr(func, "__self__", None), "__name__", "__get__")
    return name


def handle(tr: Tracer, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
    """Propagate shadows from the inputs of ``func`` to ``out`` (called only when an input is tracked)."""
    name = op_name(func)
    outs = tensors_in(out)
    if not outs:
        return  # size(), dim(), item(), shape ... nothing to follow
    if name in FIRST_ONLY:  # dtype/device moves, copies, .data: same positions, same channels
        first = tensors_in(args)[0]
        if outs[0].shape == first.shape:
            tr.put(outs[0], tr.get(first))
            return
    if name in ELEMENTWISE:
        return _elementwise(tr, name, args, kwargs, outs)
    if name in RESHAPE or name in REPLAY or name in SELECT:
        return _replay(tr, name, func, args, kwargs, out)
    if name in {"cat", "concat", "concatenate", "stack"}:
        return _concat(tr, name, func, args, kwargs, out)
    if name in SPATIAL:
        return _spatial(tr, name, args, kwargs, outs)
    if name in REDUCE or name in ALONG_DIM:
        if len(args) > 1 and isinstance(args[1], torch.Tensor):  # torch.max(a, b) is elementwise
            return _elementwise(tr, name, args, kwargs, outs)
        return reduce(tr, name, args, kwargs, outs)
    if name in MATMUL:
        return matmul(tr, name, args[0], args[1], outs[0])
    if name == "scaled_dot_product_attention":
        return sdpa(tr, name, args, kwargs, outs[0])
    if name == "linear":
        return linear(tr, name, args, kwargs, outs[0])
    if name == "prelu":
        return prelu(tr, name, args, kwargs, outs[0])
    tr.pin_all(tensors_in((args, kwargs)), name, "the speedup does not know how channels flow through it")


def _elementwise(tr: Tracer, name: str, args: tuple, kwargs: dict, outs: list[torch.Tensor]) -> None:
    target = outs[0]
    operands = tensors_in((args, {k: v for k, v in kwargs.items() if k != "out"}))
    tracked = [compact(s) for s in (tr.get(t) for t in operands) if s is not None]
    if not tracked:
        return
    tracked = [s.view([1] * (target.dim() - s.dim()) + list(s.shape)) for s in tracked]
    small = torch.broadcast_shapes(*(s.shape for s in tracked))
    spread = {d for s in tracked for d in varying_dims(s)}
    # operands spanning every channel dim are aligned channel by channel (a residual add ties them); a
    # constant-id operand broadcast over the channels (a 1-channel spatial gate) is not tied to them
    is_aligned = [all(s.shape[d] == small[d] for d in spread) for s in tracked]
    aligned = [s for s, ok in zip(tracked, is_aligned, strict=True) if ok]
    if any(varying_dims(s) for s, ok in zip(tracked, is_aligned, strict=True) if not ok):
        tr.pin_all(operands, name, "it combines channels laid out along different dims")
    merged = aligned[0].expand(small)
    if name in ADDS and len(aligned) > 1:  # a residual add: these channels are a residual stream
        tr.graph.residual.append(torch.unique(merged).cpu().numpy())
    for s in aligned[1:]:
        s = s.expand(small)
        tr.graph.uf.union_arrays(merged.reshape(-1).cpu().numpy(), s.reshape(-1).cpu().numpy())
        merged = torch.where(merged >= 0, merged, s)
    if tuple(small) != tuple(target.shape):
        merged = merged.expand(target.shape)
    spread = varying_dims(merged)
    for t in operands:
        if tr.get(t) is None and t.dim() and _spans(t, target, spread):
            tr.pin_shadow(merged, name, "it combines the channels with a per-channel tensor that no layer "
                          "produces (e.g. a parameter used directly in forward)")
            break
    tr.put(target, merged)


def _spans(t: torch.Tensor, target: torch.Tensor, dims: list[int]) -> bool:
    """Whether ``t`` (broadcast against ``target``) has more than one value along any of ``dims``."""
    shape = [1] * (target.dim() - t.dim()) + list(t.shape)
    return any(shape[d] > 1 for d in dims if d < len(shape))


def _shadow_args(tr: Tracer, obj: Any, contiguous: bool = False) -> Any:
    def swap(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        s = tr.get(x)
        if s is None:
            s = torch.full((), -1, dtype=torch.int64, device=x.device).expand(x.shape)
        return s.contiguous() if contiguous else s

    return tree_map(swap, obj)


def _run_on_shadows(tr: Tracer, name: str, func: Any, args: tuple, kwargs: dict, out: Any) -> Any:
    """Replay ``func`` on the shadows; returns None (after pinning) when that fails or shapes disagree."""
    result = None
    for contiguous in (False, True):
        try:
            result = func(*_shadow_args(tr, args, contiguous), **_shadow_args(tr, kwargs, contiguous))
            break
        except (RuntimeError, TypeError, ValueError, IndexError):
            continue
    got, want = tensors_in(result), tensors_in(out)
    if result is None or [g.shape for g in got] != [w.shape for w in want]:
        tr.pin_all(tensors_in((args, kwargs)), name, "its channel mapping could not be followed")
        return None
    return got


def _replay(tr: Tracer, name: str, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
    """Shape ops and selections: the op itself run on the shadows; pins where channels would move."""
    got = _run_on_shadows(tr, name, func, args, kwargs, out)
    if got is None:
        return
    src = tr.get(tensors_in(args)[0])
    if src is not None and name in RESHAPE and len(varying_dims(got[0])) > len(varying_dims(src)):
        tr.pin_shadow(src, name, "it splits the channel dimension (e.g. into attention heads or groups), "
                      "so it needs whole groups of channels")
    if src is not None and name in SELECT and not (name == "chunk" and _pair_chunks(tr, src, got)):
        before = set(torch.unique(compact(src)).tolist()) - {-1}
        if any(set(torch.unique(compact(g)).tolist()) - {-1} != before for g in got):
            tr.pin_shadow(src, name, "it selects channels by position, which moves when channels are removed")
    for w, g in zip(tensors_in(out), got, strict=True):
        tr.put(w, g)


def _pair_chunks(tr: Tracer, src: torch.Tensor, parts: list[torch.Tensor]) -> bool:
    """``chunk`` cuts the channel dim into equal parts: tie channel i of every part so all parts lose alike.

    Returns False (the caller pins) unless the parts split one channel dim into equal, fully tracked pieces.
    """
    dims = varying_dims(src)
    if len(dims) != 1 or len(parts) < 2:
        return False
    vectors = [channel_vector(p, dims[0]) for p in parts]
    if any(v is None or len(v) != len(vectors[0]) or bool((v < 0).any()) for v in vectors):
        return False
    for v in vectors[1:]:
        tr.graph.uf.union_arrays(vectors[0], v)
    return True


def _concat(tr: Tracer, name: str, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
    parts = tensors_in(args[0] if args else kwargs.get("tensors"))
    dim = args[1] if len(args) > 1 else kwargs.get("dim", kwargs.get("axis", 0))
    target = tensors_in(out)[0]
    shadows = [tr.get(p) for p in parts]
    spread = sorted({d for s in shadows if s is not None for d in varying_dims(s)})
    if name != "stack" and dim % target.dim() in spread:  # concatenation of channels: offsets via replay
        got = _run_on_shadows(tr, name, func, args, kwargs, out)
        if got is not None:
            tr.put(target, got[0])
        return
    # concatenation along another dim (tokens, batch): every part must carry the same channels
    tracked = [s for s in shadows if s is not None]
    if len(tracked) < len(parts) or not spread:
        tr.pin_all(parts, name, "it joins channels with a tensor no layer produces")
        return
    first = tracked[0]
    vectors = [channel_vector(s, spread[0]) for s in tracked]
    if len(spread) > 1 or any(v is None for v in vectors):
        tr.pin_all(parts, name, "its inputs carry channels along several dims")
        return
    for v in vectors[1:]:
        tr.graph.uf.union_arrays(vectors[0], v)
    d = spread[0] + (1 if name == "stack" and spread[0] >= dim % (first.dim() + 1) else 0)
    tr.put(target, ids_along(vectors[0], target, d))


def _spatial(tr: Tracer, name: str, args: tuple, kwargs: dict, outs: list[torch.Tensor]) -> None:
    x = tensors_in(args[:1])[0]
    s = tr.get(x)
    pad = args[1] if len(args) > 1 else kwargs.get("pad", ())
    if s is None:
        return
    if name == "pad" and _pad_keeps_channels(tr, s, x, pad, outs):
        return
    if set(varying_dims(s)) - {1} or (name == "pad" and len(pad) // 2 > x.dim() - 2):
        tr.pin_shadow(s, name, "it is expected to keep dims 0 and 1 (batch, channels) apart from the others")
        return
    vec = channel_vector(s, 1)
    for o in outs:
        if o.dim() == x.dim() and o.shape[1] == x.shape[1]:
            tr.put(o, ids_along(vec, o, 1))


def _pad_keeps_channels(tr: Tracer, s: torch.Tensor, x: torch.Tensor, pad: Any,
                        outs: list[torch.Tensor]) -> bool:
    """``F.pad`` that leaves the one channel dim unpadded (e.g. a channels-last window pad): ids carried over."""
    dims = varying_dims(s)
    if len(dims) != 1 or not isinstance(pad, (tuple, list)) or len(outs) != 1:
        return False
    padded = {x.dim() - 1 - i for i in range(len(pad) // 2) if pad[2 * i] or pad[2 * i + 1]}
    vec = channel_vector(s, dims[0])
    if dims[0] in padded or vec is None or outs[0].shape[dims[0]] != x.shape[dims[0]]:
        return False
    tr.put(outs[0], ids_along(vec, outs[0], dims[0]))
    return True
