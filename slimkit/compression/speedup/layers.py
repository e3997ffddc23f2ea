"""Which modules the speedup understands as a unit, and how their channels are laid out."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

CONV_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
ATTENTION_NAMES = (("q_proj", "k_proj", "v_proj", "o_proj"), ("query", "key", "value", None))
HEAD_DIM_ATTRS = ("head_dim", "attention_head_size", "head_size")
NUM_HEADS_ATTRS = ("num_heads", "num_attention_heads", "n_heads", "n_head")
NUM_KV_HEADS_ATTRS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads")
INNER_SIZE_ATTRS = ("all_head_size", "inner_dim")


def own_params(module: nn.Module) -> dict[str, nn.Parameter]:
    """Parameters registered directly on ``module`` (not on its children)."""
    return {k: v for k, v in module._parameters.items() if v is not None}


def is_norm(module: nn.Module) -> bool:
    """BatchNorm, LayerNorm, GroupNorm, RMSNorm, or a look-alike (e.g. LlamaRMSNorm) with 1-D weight/bias."""
    if isinstance(module, (_BatchNorm, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm)):
        return True
    name = type(module).__name__
    params = own_params(module)
    return (
        name.endswith(("RMSNorm", "LayerNorm"))
        and "weight" in params
        and set(params) <= {"weight", "bias"}
        and all(p.dim() == 1 and p.numel() == params["weight"].numel() for p in params.values())
    )


def subclass_problem(module: nn.Module) -> str:
    """Why the speedup cannot shrink a *subclass* of a layer it knows ('' when it can, or for torch's own classes).

    A subclass such as a TF-"SAME" ``class Conv2dSame(nn.Conv2d)`` with its own ``forward`` is shrunk in place
    (keeping its class and forward) when its only state is ``weight`` and ``bias``. Extra parameters, buffers or
    submodules may follow the channels in ways the speedup cannot see, so such a subclass is refused.
    """
    if type(module).__module__.startswith("torch.nn") or not isinstance(module, (*CONV_TYPES, nn.Linear, nn.Embedding)):
        return ""
    params = module._parameters.items()
    extras = [f"parameter {k!r}" for k, v in params if v is not None and k not in ("weight", "bias")]
    extras += [f"buffer {k!r}" for k, v in module._buffers.items() if v is not None]
    extras += [f"submodule {k!r}" for k in module._modules]
    return ", ".join(extras)


def torch_base(module: nn.Module) -> str:
    """The name of the first ``torch.nn`` class ``module`` derives from (e.g. ``"Conv2d"``)."""
    return next((c.__name__ for c in type(module).__mro__ if c.__module__.startswith("torch.nn")), "Module")


def norm_channel_dim(module: nn.Module) -> int:
    """The activation dim a norm's parameters follow: 1 for BatchNorm/GroupNorm, the last dim otherwise."""
    return 1 if isinstance(module, (_BatchNorm, nn.GroupNorm)) else -1


def norm_problem(module: nn.Module) -> str:
    """Why a norm cannot follow a shrinking channel dim ('' when it can)."""
    if isinstance(module, (nn.LayerNorm, nn.RMSNorm)) and len(module.normalized_shape) != 1:
        return "it normalises over several dims"
    if isinstance(module, nn.GroupNorm) and module.num_groups not in (1, module.num_channels):
        return f"GroupNorm with {module.num_groups} groups needs whole groups of channels"
    return ""


@dataclass
class AttentionSpec:
    """The projections and head layout of a recognised attention block."""

    q: str
    k: str
    v: str
    o: str | None
    num_heads: int
    num_kv_heads: int
    head_dim: int


def attention_spec(module: nn.Module) -> AttentionSpec | None:
    """Recognise a Hugging Face style attention block whose forward reshapes with ``(-1, head_dim)``.

    It needs Linear q/k/v projections (and optionally o) as children, a head-size attribute, no
    parameters of its own, and no other parametrised child except per-head-dim norms (q_norm/k_norm).
    """
    if own_params(module):
        return None
    for names in ATTENTION_NAMES:
        children = [getattr(module, n, None) if n else None for n in names]
        if not all(isinstance(c, nn.Linear) for c in children[:3]):
            continue
        if names[3] and not isinstance(children[3], nn.Linear):
            continue
        q, k, v = children[:3]
        head_dim = next((getattr(module, a) for a in HEAD_DIM_ATTRS if isinstance(getattr(module, a, None), int)),
                        None)
        if head_dim is None:
            heads = next((getattr(module, a) for a in NUM_HEADS_ATTRS if isinstance(getattr(module, a, None), int)),
                         None)
            head_dim = q.out_features // heads if heads else None
        if not head_dim or q.out_features % head_dim or k.out_features % head_dim:
            return None
        if v.out_features != k.out_features:
            return None
        nh, nkv = q.out_features // head_dim, k.out_features // head_dim
        if nh % nkv:
            return None
        known = {n for n in names if n}
        for child_name, child in module.named_children():
            if child_name in known or not any(True for _ in child.parameters()):
                continue
            if not (is_norm(child) and own_params(child)["weight"].numel() == head_dim):
                return None
        return AttentionSpec(names[0], names[1], names[2], names[3], nh, nkv, head_dim)
    return None


def leaf_kind(module: nn.Module) -> str | None:
    """The unit the tracer handles ``module`` as, or None to trace through its forward."""
    if isinstance(module, CONV_TYPES):
        if module.groups == 1:
            return "conv"
        if module.groups == module.in_channels:
            return "depthwise"
        return "grouped_conv"
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, nn.Embedding):
        return "embedding"
    if is_norm(module):
        return "norm"
    if attention_spec(module) is not None:
        return "attention"
    if own_params(module):
        return "unknown"
    return None
