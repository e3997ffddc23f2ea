"""Shrinking one module in place to kept channel indices, and undoing that when something fails."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from .attention_spec import HEAD_DIM_ATTRS, INNER_SIZE_ATTRS, NUM_HEADS_ATTRS, NUM_KV_HEADS_ATTRS, int_attr
from .errors import SpeedupError, check_kept
from .experts import experts_spec, shrink_experts
from .layers import CONV_TYPES, DECONV_TYPES, is_conv1d, is_norm, out_dim

#: size attributes a module with per-channel parameters may keep for its forward (updated with the parameter)
SIZE_ATTRS = ("hidden_dim", "hidden_size")


class Snapshot:
    """Parameters, buffers and plain attributes of some modules, to restore them after a failed shrink."""

    def __init__(self, modules: list[nn.Module]) -> None:
        self.saved = [
            (m, dict(m._parameters), dict(m._buffers), {k: v for k, v in vars(m).items() if not k.startswith("_")})
            for m in modules
        ]

    def restore(self) -> None:
        """Put every saved module back as it was."""
        for m, params, buffers, attrs in self.saved:
            m._parameters.clear()
            m._parameters.update(params)
            m._buffers.clear()
            m._buffers.update(buffers)
            m.__dict__.update(attrs)


def _indices(name: str, key: str, value: Any, size: int) -> torch.Tensor:
    return torch.tensor(check_kept(name, key, value, size), dtype=torch.long)


def _set(module: nn.Module, attr: str, value: torch.Tensor | None) -> None:
    old = getattr(module, attr, None)
    if old is None or value is None:
        return
    if isinstance(old, nn.Parameter):
        setattr(module, attr, nn.Parameter(value.detach().clone(), requires_grad=old.requires_grad))
    else:
        module._buffers[attr] = value.detach().clone()


def _take(t: torch.Tensor | None, dim: int, idx: torch.Tensor) -> torch.Tensor | None:
    return None if t is None else t.index_select(dim, idx.to(t.device))


def _add_bias(name: str, module: nn.Module, entry: Mapping[str, Any], size: int) -> None:
    """``"add_bias": True``: the speedup folded removed constant channels into a bias the layer did not have."""
    flag = entry.get("add_bias", False)
    if not isinstance(flag, bool):
        raise SpeedupError(f"kept_channels[{name!r}]['add_bias'] must be true or false; got {flag!r:.40}.")
    if flag and module.bias is None:
        module.bias = nn.Parameter(torch.zeros(size, dtype=module.weight.dtype, device=module.weight.device),
                                   requires_grad=module.weight.requires_grad)


def shrink_module(name: str, module: nn.Module, entry: Mapping[str, Any]) -> None:
    """Shrink ``module`` to ``entry`` = ``{"out": [...], "in": [...]}`` (or ``{"heads", "kv_heads"}``).

    A Conv/Linear entry may add ``"add_bias": True`` (a zero bias is created when the layer has none).
    """
    if not isinstance(entry, Mapping) or not ({"out", "in"} <= set(entry) or {"heads", "kv_heads"} <= set(entry)):
        raise SpeedupError(f"kept_channels[{name!r}] must be {{'out': [...], 'in': [...]}} (or heads/kv_heads for an "
                           f"attention block); got {entry!r:.120}.")
    if "heads" in entry:
        return _shrink_attention(name, module, entry)
    if experts_spec(module) is not None:
        return shrink_experts(name, module, entry)
    kind = type(module).__name__
    if isinstance(module, CONV_TYPES):
        out = _indices(name, "out", entry["out"], module.out_channels)
        inn = _indices(name, "in", entry["in"], module.in_channels)
        if module.groups == 1:
            weight = _take(module.weight, 0, out).index_select(1, inn.to(module.weight.device))
        elif module.groups == module.in_channels:  # depthwise: each output row reads one input channel
            mult = module.out_channels // module.in_channels
            if sorted({int(o) // mult for o in out}) != sorted(inn.tolist()) or len(out) != len(inn) * mult:
                raise SpeedupError(f"kept_channels[{name!r}]: a depthwise conv keeps whole channels; 'out' must be "
                                   f"the rows of the kept 'in' channels ({mult} per channel).")
            weight = _take(module.weight, 0, out)
            module.groups = len(inn)
        else:  # grouped: whole groups go, each group's filters read its own input channels
            width, per_group = module.in_channels // module.groups, module.out_channels // module.groups
            groups = sorted({int(i) // width for i in inn})
            if len(inn) != len(groups) * width or [int(o) for o in out] != [g * per_group + r for g in groups
                                                                          for r in range(per_group)]:
                raise SpeedupError(f"kept_channels[{name!r}]: a grouped convolution (groups={module.groups}) keeps "
                                   "whole groups; 'in' and 'out' must be the channels of the same kept groups.")
            weight = _take(module.weight, 0, out)
            module.groups = len(groups)
        _set(module, "weight", weight)
        _set(module, "bias", _take(module.bias, 0, out))
        _add_bias(name, module, entry, len(out))
        module.out_channels, module.in_channels = len(out), len(inn)
        return
    if isinstance(module, DECONV_TYPES):  # weight [in, out / groups, *kernel]
        if module.groups != 1:
            raise SpeedupError(f"kept_channels names {name!r}, a {kind} with groups={module.groups}; slimkit shrinks "
                               "transposed convolutions with groups=1 only.")
        return _shrink_dense(name, module, entry, ("out_channels", "in_channels"))
    if is_conv1d(module):  # transformers' Conv1D: weight [in, out], sizes in nf / nx
        return _shrink_dense(name, module, entry, ("nf", "nx"))
    if isinstance(module, nn.Linear):
        return _shrink_dense(name, module, entry, ("out_features", "in_features"))
    if isinstance(module, nn.Embedding):
        out = _indices(name, "out", entry["out"], module.embedding_dim)
        _set(module, "weight", _take(module.weight, 1, out))
        module.embedding_dim = len(out)
        return
    if is_norm(module):
        return _shrink_norm(name, module, entry)
    raise SpeedupError(f"kept_channels names {name!r}, a {kind}; only Conv, ConvTranspose, Linear, Embedding, norm "
                       "layers and attention blocks can be shrunk.")


def _shrink_dense(name: str, module: nn.Module, entry: Mapping[str, Any], attrs: tuple[str, str]) -> None:
    """Keep ``entry``'s out / in channels of a Linear, a Conv1D or a transposed conv (weight dims 0 and 1).

    ``attrs`` name the module's (out, in) size attributes.
    """
    dim = out_dim(module)
    out = _indices(name, "out", entry["out"], module.weight.shape[dim])
    inn = _indices(name, "in", entry["in"], module.weight.shape[1 - dim])
    _set(module, "weight", _take(_take(module.weight, dim, out), 1 - dim, inn))
    _set(module, "bias", _take(module.bias, 0, out))
    _add_bias(name, module, entry, len(out))
    setattr(module, attrs[0], len(out))
    setattr(module, attrs[1], len(inn))


def _shrink_norm(name: str, module: nn.Module, entry: Mapping[str, Any]) -> None:
    size = module.weight.numel() if getattr(module, "weight", None) is not None else (
        getattr(module, "num_features", None) or getattr(module, "num_channels", None)
        or module.normalized_shape[-1])
    out = _indices(name, "out", entry["out"], size)
    for attr in ("weight", "bias", "running_mean", "running_var"):
        _set(module, attr, _take(getattr(module, attr, None), 0, out))
    n = len(out)
    if isinstance(module, _BatchNorm):
        module.num_features = n
    elif isinstance(module, nn.GroupNorm):
        if module.num_groups == module.num_channels:
            module.num_groups = n
        elif module.num_groups != 1:
            raise SpeedupError(f"{name!r}: GroupNorm with {module.num_groups} groups cannot be shrunk channel-wise.")
        module.num_channels = n
    elif isinstance(getattr(module, "normalized_shape", None), (tuple, list)):
        module.normalized_shape = (n,)


def _shrink_attention(name: str, module: nn.Module, entry: Mapping[str, Any]) -> None:
    """Update the head counts an attention block keeps as attributes (projections are shrunk separately)."""
    heads, kv = entry["heads"], entry["kv_heads"]
    old_heads = int_attr(module, NUM_HEADS_ATTRS)
    _indices(name, "heads", heads, old_heads or (max(heads, default=0) + 1))
    _indices(name, "kv_heads", kv, max(kv, default=0) + 1)
    head_dim = int_attr(module, HEAD_DIM_ATTRS)
    for attrs, value in ((NUM_HEADS_ATTRS, len(heads)), (NUM_KV_HEADS_ATTRS, len(kv)),
                         (INNER_SIZE_ATTRS, len(heads) * head_dim if head_dim else None)):
        for a in attrs:
            if value is not None and isinstance(getattr(module, a, None), int):
                setattr(module, a, value)
    config = getattr(module, "config", None)  # a forward may read the head counts from the model config
    counts = {"num_attention_heads": len(heads), "num_key_value_heads": len(kv)}
    if config is not None and any(isinstance(getattr(config, k, None), int) and getattr(config, k) != v
                                  for k, v in counts.items()):
        own = copy.copy(config)  # this block's own config: other blocks may keep other head counts
        for key, value in counts.items():
            if isinstance(getattr(own, key, None), int):
                setattr(own, key, value)
        module.config = own


def shrink_param(name: str, module: nn.Module, attr: str, entry: Mapping[str, Any]) -> None:
    """Shrink the per-channel parameter ``attr`` of ``module`` to ``{"param_dim": d, "keep": [...]}``."""
    param = module._parameters.get(attr)
    dim = entry.get("param_dim")
    if param is None or not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim < param.dim():
        raise SpeedupError(f"kept_channels[{name!r}] must name a parameter and a dim of it as {{'param_dim': d, "
                           f"'keep': [...]}}; got {entry!r:.120} for {type(module).__name__}.{attr}.")
    keep = _indices(name, "keep", entry.get("keep"), param.shape[dim])
    old = param.shape[dim]
    _set(module, attr, _take(param, dim, keep))
    for size_attr in SIZE_ATTRS:  # e.g. a MoE router reshaping its input with (-1, self.hidden_dim)
        if getattr(module, size_attr, None) == old and not isinstance(getattr(module, size_attr), bool):
            setattr(module, size_attr, len(keep))
