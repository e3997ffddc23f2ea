"""Which modules the tracer handles as one unit (:func:`leaf_kind`), and how it follows channels through them."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .attention_spec import attention_spec
from .experts import experts_spec
from .graph import AttentionRecord, LeafRecord, ParamRecord, Tracer, ids_along
from .layers import CONV_TYPES, DECONV_TYPES, is_linear, is_norm, linear_io, norm_channel_dim, norm_problem, own_params

CHANNEL_DIM = {"conv": 1, "depthwise": 1, "grouped_conv": 1, "pinned_conv": 1, "linear": -1, "attention": -1,
               "experts": -1}


def leaf_kind(module: nn.Module) -> str | None:
    """The unit the tracer handles ``module`` as, or None to trace through its forward.

    A module with parameters of its own that is none of these is traced through: its parameters follow the
    channels they touch (see :mod:`.tracer`). A transposed conv with ``groups=1`` is a ``"conv"`` (its channels
    run along dim 1 of its input and output like a conv's; only its weight is laid out ``[in, out, *kernel]``);
    a grouped one keeps its channels (``"pinned_conv"``).
    """
    if isinstance(module, DECONV_TYPES):
        return "conv" if module.groups == 1 else "pinned_conv"
    if isinstance(module, CONV_TYPES):
        if module.groups == 1:
            return "conv"
        if module.groups == module.in_channels:
            return "depthwise"
        return "grouped_conv"
    if is_linear(module):
        return "linear"
    if isinstance(module, nn.Embedding):
        return "embedding"
    if is_norm(module):
        return "norm"
    if attention_spec(module) is not None:
        return "attention"
    if experts_spec(module) is not None:
        return "experts"
    return None


def handle_leaf(tr: Tracer, name: str, kind: str, module: nn.Module, x: torch.Tensor | None,
                y: torch.Tensor | None) -> None:
    """Record ``module``'s channels in the graph and give its output the ids it carries."""
    g = tr.graph
    if kind == "embedding":
        rec = tr.record(name, kind, module, None)
        rec.out_ids = g.new_space(name, module.embedding_dim).ids
    elif kind == "norm":
        dim = norm_channel_dim(module)
        size = module.weight.numel() if getattr(module, "weight", None) is not None else x.shape[dim]
        rec = tr.record(name, kind, module, tr.input_ids(name, x, dim, size))
        rec.out_ids = rec.in_ids
        problem = norm_problem(module)
        if problem:
            g.pin(rec.in_ids, type(module).__name__, name, problem)
        if y is not None and x is not None and y.shape == x.shape:
            tr.put(y, tr.get(x))
        return
    elif kind == "attention":
        rec = _attention(tr, name, module, x)
    elif kind == "experts":
        spec = experts_spec(module)
        rec = tr.record(name, kind, module, tr.input_ids(name, x, -1, spec.hidden))
        rec.out_ids = g.new_space(name, spec.hidden).ids
        g.new_space(name, spec.num_experts * spec.intermediate, kind="inner")
    elif kind == "grouped_conv":
        rec = _grouped(tr, name, module, x)
    elif kind == "pinned_conv":  # a grouped transposed conv: its input and output channels stay
        rec = tr.record(name, kind, module, tr.input_ids(name, x, 1, module.in_channels))
        g.pin(rec.in_ids, type(module).__name__, name, f"a transposed convolution with groups={module.groups} "
              "(slimkit shrinks transposed convolutions with groups=1 only)")
    else:
        dim = CHANNEL_DIM[kind]
        out_size, in_size = linear_io(module) if kind == "linear" else (module.out_channels, module.in_channels)
        rec = tr.record(name, kind, module, tr.input_ids(name, x, dim, in_size))
        if kind == "depthwise":
            rec.out_ids = np.repeat(rec.in_ids, module.out_channels // module.in_channels)
        else:
            rec.out_ids = g.new_space(name, out_size).ids
    dim = CHANNEL_DIM.get(kind, -1)
    if y is not None and rec.out_ids is not None and y.dim() and y.shape[dim] == len(rec.out_ids):
        tr.put(y, ids_along(rec.out_ids, y, dim))


def _grouped(tr: Tracer, name: str, module: nn.Module, x: torch.Tensor | None) -> LeafRecord:
    """A grouped conv keeps or drops whole groups: a group's input and output channels form one class."""
    g = tr.graph
    rec = tr.record(name, "grouped_conv", module, tr.input_ids(name, x, 1, module.in_channels))
    groups = rec.in_ids.reshape(module.groups, -1)
    if bool((groups >= 0).all()):
        for row in groups:
            g.uf.union_all(row.tolist())
        rec.out_ids = np.repeat(groups[:, 0], module.out_channels // module.groups)
        return rec
    rec.out_ids = g.new_space(name, module.out_channels).ids  # reads channels no layer produces: keep them
    detail = f"grouped convolution with groups={module.groups} reads channels no layer produces"
    g.pin(rec.in_ids, "Conv(groups>1)", name, detail)
    g.pin(rec.out_ids, "Conv(groups>1)", name, detail)
    return rec


def _attention(tr: Tracer, name: str, module: nn.Module, x: torch.Tensor | None) -> LeafRecord:
    spec = attention_spec(module)
    size = linear_io(getattr(module, spec.q))[1]
    rec = tr.record(name, "attention", module, tr.input_ids(name, x, -1, size))
    att = tr.graph.attention.get(name)
    if att is None:
        full = {n: f"{name}.{n}" if name else n for n in (spec.q, spec.k, spec.v, spec.o) if n}
        att = AttentionRecord(full[spec.q], full[spec.k], full[spec.v], full.get(spec.o), spec.num_heads,
                              spec.num_kv_heads, spec.head_dim, spec.fused, name=name)
        tr.graph.attention[name] = att
    if spec.o is not None:
        rec.out_ids = tr.graph.new_space(att.o, linear_io(getattr(module, spec.o))[0]).ids
    else:
        att.heads_space = tr.graph.new_space(name, spec.num_heads * spec.head_dim, kind="heads")
        rec.out_ids = att.heads_space.ids
    return rec


def param_channel_dim(param: torch.Tensor) -> int | None:
    """The dim a per-channel parameter's channels run along: its last dim longer than 1 (None: a scalar)."""
    return next((d for d in range(param.dim() - 1, -1, -1) if param.shape[d] > 1), None)


def follow_params(tr: Tracer, name: str, module: nn.Module) -> None:
    """Give the parameters ``module`` uses in its own forward ids, so they follow the channels they touch."""
    for attr, param in own_params(module).items():
        dim = param_channel_dim(param)
        if dim is None:
            continue
        qualified = f"{name}.{attr}" if name else attr
        record = tr.graph.params.get(qualified)
        if record is None:
            ids = tr.graph.new_space(qualified, param.shape[dim], kind="param").ids
            record = tr.graph.params[qualified] = ParamRecord(qualified, module, attr, dim, ids)
        tr.put(param, ids_along(record.ids, param, dim))
