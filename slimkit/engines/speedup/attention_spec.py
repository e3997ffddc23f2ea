"""Recognising Hugging Face style attention blocks the speedup can shrink by whole heads.

A block qualifies when its q/k/v projections (separate Linear layers, or one fused Linear/``Conv1D`` whose
rows are q, then k, then v) and its optional output projection are children, it has a head-size attribute,
no parameters of its own, and no other parametrised child except per-head-dim norms (q_norm/k_norm). Its
forward must reshape with ``(-1, head_dim)`` or read the head counts from the attributes the shrink updates
(``num_heads``-like names, ``all_head_size``/``split_size``, and ``config.num_attention_heads``).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from .layers import is_linear, is_norm, linear_io, own_params

ATTENTION_NAMES = (("q_proj", "k_proj", "v_proj", "o_proj"), ("query", "key", "value", None),
                   ("q_lin", "k_lin", "v_lin", "out_lin"), ("query_proj", "key_proj", "value_proj", None))
FUSED_NAMES = (("qkv_proj", "o_proj"), ("c_attn", "c_proj"))
HEAD_DIM_ATTRS = ("head_dim", "attention_head_size", "head_size")
NUM_HEADS_ATTRS = ("num_heads", "num_attention_heads", "n_heads", "n_head")
NUM_KV_HEADS_ATTRS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads")
INNER_SIZE_ATTRS = ("all_head_size", "inner_dim", "split_size")


@dataclass
class AttentionSpec:
    """The projections and head layout of a recognised attention block (q == k == v when ``fused``)."""

    q: str
    k: str
    v: str
    o: str | None
    num_heads: int
    num_kv_heads: int
    head_dim: int
    fused: bool = False


def int_attr(module: nn.Module, names: tuple[str, ...]) -> int | None:
    """The first of the attributes ``names`` that ``module`` holds as an int (None: none does)."""
    return next((getattr(module, a) for a in names if isinstance(getattr(module, a, None), int)), None)


def _head_dim(module: nn.Module, q_rows: int) -> int | None:
    head_dim = int_attr(module, HEAD_DIM_ATTRS)
    if head_dim is None:
        heads = int_attr(module, NUM_HEADS_ATTRS)
        head_dim = q_rows // heads if heads else None
    return head_dim


def _only_known_children(module: nn.Module, known: set[str], head_dim: int) -> bool:
    for child_name, child in module.named_children():
        if child_name in known or not any(True for _ in child.parameters()):
            continue
        if not (is_norm(child) and own_params(child)["weight"].numel() == head_dim):
            return False
    return True


def _separate(module: nn.Module) -> AttentionSpec | None:
    for names in ATTENTION_NAMES:
        children = [getattr(module, n, None) if n else None for n in names]
        if not all(c is not None and is_linear(c) for c in children[:3]):
            continue
        if names[3] and not is_linear(children[3]):
            continue
        (q_out, _), (k_out, _), (v_out, _) = (linear_io(c) for c in children[:3])
        head_dim = _head_dim(module, q_out)
        if not head_dim or q_out % head_dim or k_out % head_dim or v_out != k_out:
            return None
        nh, nkv = q_out // head_dim, k_out // head_dim
        if nh % nkv or not _only_known_children(module, {n for n in names if n}, head_dim):
            return None
        return AttentionSpec(names[0], names[1], names[2], names[3], nh, nkv, head_dim)
    return None


def _fused(module: nn.Module) -> AttentionSpec | None:
    for qkv, o in FUSED_NAMES:
        proj, out = getattr(module, qkv, None), getattr(module, o, None)
        if not (is_linear(proj) and is_linear(out)):
            continue
        rows = linear_io(proj)[0]
        q_rows = linear_io(out)[1]  # the output projection reads the query heads' context
        head_dim = _head_dim(module, q_rows)
        if not head_dim or q_rows % head_dim or (rows - q_rows) % (2 * head_dim) or rows <= q_rows:
            return None
        nh, nkv = q_rows // head_dim, (rows - q_rows) // (2 * head_dim)
        declared = int_attr(module, NUM_KV_HEADS_ATTRS)
        if nh % nkv or (declared is not None and declared != nkv) or not _only_known_children(module, {qkv, o},
                                                                                                  head_dim):
            return None
        return AttentionSpec(qkv, qkv, qkv, o, nh, nkv, head_dim, fused=True)
    return None


def attention_spec(module: nn.Module) -> AttentionSpec | None:
    """Recognise an attention block (see the module docstring), or None."""
    if own_params(module):
        return None
    return _separate(module) or _fused(module)
