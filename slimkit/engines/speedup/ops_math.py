"""How channel ids flow through reductions and contractions (mean/sum/softmax, matmul, attention).

A reduction over non-channel dims keeps the ids; over a channel dim it consumes them (a sum, where removed
zero channels add nothing) or pins them (mean, norm, softmax: their value depends on the channel count).
A contraction ties the contracted channels of both operands together (q and k in ``q @ k.T``).
"""

from __future__ import annotations

from typing import Any

import torch

from .graph import Tracer, channel_vector, ids_along, tensors_in, varying_dims

REDUCE = {"mean", "sum", "nansum", "amax", "amin", "max", "min", "var", "std", "norm", "logsumexp", "prod",
          "argmax", "argmin", "all", "any", "var_mean", "std_mean"}
SUM_LIKE = {"sum", "nansum", "any"}
ALONG_DIM = {"softmax", "log_softmax", "softmin", "cumsum", "cumprod"}
MATMUL = {"matmul", "__matmul__", "mm", "bmm"}


def _dims_arg(name: str, x: torch.Tensor, args: tuple, kwargs: dict) -> list[int] | None:
    if "dim" in kwargs or "axis" in kwargs:
        dim = kwargs.get("dim", kwargs.get("axis"))
    elif name == "norm":
        dim = args[2] if len(args) > 2 else None
    else:
        dim = next((a for a in args[1:2] if not isinstance(a, bool) and isinstance(a, (int, tuple, list))),
                   None)
    if dim is None:
        return None if name not in ALONG_DIM else [x.dim() - 1]
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % x.dim() for d in dims}) if x.dim() else []


def reduce(tr: Tracer, name: str, args: tuple, kwargs: dict, outs: list[torch.Tensor]) -> None:
    """Reductions (mean, sum, max...) and along-dim ops (softmax, cumsum)."""
    x = tensors_in(args[:1])[0]
    s = tr.get(x)
    dims = _dims_arg(name, x, args, kwargs)
    dims = list(range(x.dim())) if dims is None else dims
    hit = set(dims) & set(varying_dims(s))
    if name in ALONG_DIM:
        if hit:
            tr.pin_shadow(s, name, "its result over the channel dim depends on how many channels there are")
        tr.put(outs[0], s)
        return
    if hit:
        if name not in SUM_LIKE:
            tr.pin_shadow(s, name, "its result over the channel dim depends on how many channels there are")
        return
    keepdim = bool(kwargs.get("keepdim", next((a for a in args[2:] if isinstance(a, bool)), False)))
    r = s
    for d in sorted(dims, reverse=True):
        r = r.narrow(d, 0, 1) if keepdim else r.select(d, 0)
    for o in outs:
        if o.dim() == r.dim():
            tr.put(o, r.expand(o.shape))


def matmul(tr: Tracer, name: str, a: Any, b: Any, out: torch.Tensor) -> None:
    """``a @ b``: tie a's last-dim channels to b's second-to-last, carry a's rows or b's columns."""
    sa = tr.get(a) if isinstance(a, torch.Tensor) else None
    sb = tr.get(b) if isinstance(b, torch.Tensor) else None
    if a.dim() < 2 or b.dim() < 2:
        tr.pin_all([a, b], name, "vector products are not followed")
        return
    va, vb = (sa is not None and a.dim() - 1 in varying_dims(sa)), (sb is not None and b.dim() - 2 in
                                                                     varying_dims(sb))
    ka = channel_vector(sa, -1) if va else None
    kb = channel_vector(sb, -2) if vb else None
    if va != vb or (va and (ka is None or kb is None)):
        tr.pin_all([a, b], name, "it contracts channels against a matrix no layer produces")
    elif va:
        tr.graph.uf.union_arrays(ka, kb)
    rows = channel_vector(sa, -2) if sa is not None and a.dim() - 2 in varying_dims(sa) else None
    cols = channel_vector(sb, -1) if sb is not None and b.dim() - 1 in varying_dims(sb) else None
    if rows is not None and cols is not None:
        tr.pin_all([a, b], name, "both operands carry channels into the result")
    elif rows is not None:
        tr.put(out, ids_along(rows, out, -2))
    elif cols is not None:
        tr.put(out, ids_along(cols, out, -1))


def sdpa(tr: Tracer, name: str, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
    """``scaled_dot_product_attention``: q and k channels tied, the output carries v's channels."""
    q, k, v = (list(args) + [kwargs.get(n) for n in ("query", "key", "value")])[:3]
    sq, sk, sv = tr.get(q), tr.get(k), tr.get(v)
    vq = channel_vector(sq, -1) if sq is not None else None
    vk = channel_vector(sk, -1) if sk is not None else None
    if (sq is None) != (sk is None) or (sq is not None and (vq is None or vk is None)):
        tr.pin_all([q, k], name, "query and key channels could not be matched")
    elif vq is not None:
        tr.graph.uf.union_arrays(vq, vk)
    if sv is not None:
        vv = channel_vector(sv, -1)
        if vv is None:
            tr.pin_all([v], name, "value channels vary across heads")
        else:
            tr.put(out, ids_along(vv, out, -1))


def linear(tr: Tracer, name: str, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
    """``F.linear(x, weight)`` with a parameter a traced-through module owns (a MoE router's ``[E, H]`` weight).

    The weight's tracked dim must be its input dim (dim 1): those ids are tied to ``x``'s last-dim channels and
    the output carries none. Anything else is pinned.
    """
    x, w = (list(args) + [kwargs.get("input"), kwargs.get("weight")])[:2]
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    sx, sw = tr.get(x), tr.get(w)
    if bias is not None and tr.get(bias) is not None or w is None or w.dim() != 2:
        tr.pin_all([x, w, bias], name, "its weight's output rows carry channels")
        return
    if sw is not None and varying_dims(sw) != [1]:
        tr.pin_all([x, w], name, "its weight's output rows carry channels")
        return
    vx = channel_vector(sx, -1) if sx is not None and x.dim() - 1 in varying_dims(sx) else None
    if (sx is not None and vx is None) or (sw is None) != (vx is None) or (sx is not None and set(
            varying_dims(sx)) - {x.dim() - 1}):
        tr.pin_all([x, w], name, "it contracts channels against a matrix no layer produces")
        return
    if vx is not None:
        tr.graph.uf.union_arrays(vx, channel_vector(sw, 1))


def prelu(tr: Tracer, name: str, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
    """``F.prelu(x, weight)``: a per-channel weight along dim 1 follows x's channels."""
    x, w = (list(args) + [kwargs.get("input"), kwargs.get("weight")])[:2]
    sx, sw = tr.get(x), tr.get(w)
    if sx is None or x.dim() < 2 or (sw is not None and w.numel() != x.shape[1]):
        tr.pin_all([x, w], name, "its weight does not follow the channels along dim 1")
        return
    vx = channel_vector(sx, 1)
    if vx is None or set(varying_dims(sx)) - {1} or (sw is None and w.numel() > 1):
        tr.pin_all([x, w], name, "its weight does not follow the channels along dim 1")
        return
    if sw is not None:
        tr.graph.uf.union_arrays(vx, sw.reshape(-1).cpu().numpy())
    tr.put(out, ids_along(vx, out, 1))
