"""A model's weights as GGUF tensors: named, transformed and encoded as its :class:`~.families.Family` says.

Every weight is either a float tensor or a :class:`Packed` grid (slimkit's low-bit codes with per-group scales and
zeros, ``[..., out, in]``). The transforms of :mod:`.families` only select or reorder rows, so a packed weight
keeps its grid through them and is written as the GGUF block type with the same grid (:mod:`.blocks`).

Packed modules reach the writer through :data:`PACKED`, one small adapter per module type that lists the
module's ``(Hugging Face parameter name, value)`` pairs. A packed experts module adds itself with one entry whose
adapter returns ``(f"{path}.gate_up_proj", Packed(codes [E, 2I, H], scales [E, 2I, G], zeros, bits, group_size))``
and the same for ``down_proj``: the experts split, the block packing and the checks are shared.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Union

import gguf
import numpy as np
import torch
from torch import nn

from slimkit.core.weights import CONV1D, target_kind, weight_of
from slimkit.engines.gguf.blocks import BLOCK, block_type, pack_blocks
from slimkit.engines.gguf.families import EXPERT_SPLITS, Dims, Family
from slimkit.engines.quantization.experts import DOWN, FIRST
from slimkit.engines.quantization.lowbit.experts import PackedExperts
from slimkit.engines.quantization.lowbit.linear import PackedLinear
from slimkit.errors import ConfigError, ModelNotSupportedError


@dataclass(frozen=True)
class Packed:
    """A packed low-bit weight: codes ``[..., out, in]``, scales and zeros ``[..., out, groups]``."""

    codes: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor
    bits: int
    group_size: int
    input_scale: torch.Tensor | None = None

    @property
    def in_features(self) -> int:
        """Length of a row."""
        return int(self.codes.shape[-1])

    def dim(self) -> int:
        """Number of dimensions of the weight (2, or 3 for experts)."""
        return self.codes.dim()

    def rows(self, index: torch.Tensor | slice) -> Packed:
        """The weight with its output rows selected or reordered by ``index``."""
        return replace(self, codes=self.codes[..., index, :], scales=self.scales[..., index, :],
                       zeros=self.zeros[..., index, :])

    def dequantize(self) -> torch.Tensor:
        """The float weight ``(q - z) * s``."""
        def spread(t: torch.Tensor) -> torch.Tensor:
            return t.float().repeat_interleave(self.group_size, -1)[..., : self.in_features]
        return (self.codes.float() - spread(self.zeros)) * spread(self.scales)


Value = Union[torch.Tensor, Packed]


def _packed_linear(layer: PackedLinear, path: str) -> list[tuple[str, Value]]:
    weight = Packed(layer.codes(), layer.scales, layer.zeros, layer.bits, layer.group_size, layer.input_scale)
    return [(f"{path}.weight", weight)] + ([(f"{path}.bias", layer.bias)] if layer.bias is not None else [])


def _packed_experts(module: PackedExperts, path: str) -> list[tuple[str, Value]]:
    return [(f"{path}.{module.buffer_prefix(which)}",
             Packed(module.codes(which), *module.packed(which)[1:], module.bits, module.group_size,
                    module.input_scale_of(which)))
            for which in (FIRST, DOWN)]


#: packed module type -> adapter ``(module, path) -> [(Hugging Face parameter name, value), ...]``
PACKED: dict[type, Callable[[Any, str], list[tuple[str, Value]]]] = {PackedLinear: _packed_linear,
                                                                     PackedExperts: _packed_experts}


def hf_tensors(model: nn.Module) -> Iterator[tuple[str, Value, Any]]:
    """``(name, value, identity)`` of every weight; a tied weight comes again under its other name, same identity.

    Conv1D weights come as ``[out, in]``; experts as their 3-D parameters; packed modules through :data:`PACKED`.
    """
    for path, module in model.named_modules():
        adapter = PACKED.get(type(module))
        if adapter is not None:
            for name, value in adapter(module, path):
                yield name, value, id(value) if isinstance(value, torch.Tensor) else (id(module), name)
            continue
        conv1d = target_kind(module) == CONV1D
        for name, param in module.named_parameters(recurse=False):
            value = weight_of(module) if conv1d and name == "weight" else param
            yield f"{path}.{name}", value, id(param)


def rope_rows(n_rows: int, n_head: int) -> torch.Tensor:
    """Row order llama.cpp's llama-style rotary wants for q/k: per head, the two halves interleaved."""
    return torch.arange(n_rows).view(n_head, 2, n_rows // n_head // 2).transpose(1, 2).reshape(-1)


def grouped_qkv_rows(d: Dims) -> torch.Tensor:
    """Row order turning a per-group fused qkv ``[kv, q_per_kv + 2, head_dim]`` into ``[q; k; v]``."""
    per = d.heads // d.kv_heads
    rows = torch.arange(d.kv_heads * (per + 2) * d.head_dim).view(d.kv_heads, per + 2, d.head_dim)
    return torch.cat([rows[:, :per].reshape(-1), rows[:, per].reshape(-1), rows[:, per + 1].reshape(-1)])


def _rows(value: Value, index: torch.Tensor | slice) -> Value:
    if isinstance(value, Packed):
        return value.rows(index)
    return value[..., index, :] if value.dim() > 1 else value[index]


def _n_rows(value: Value) -> int:
    return int((value.codes if isinstance(value, Packed) else value).shape[-2 if value.dim() > 1 else -1])


def gguf_names(hf_name: str, value: Value, family: Family, names: gguf.TensorNameMap) -> list[tuple[str, Value]]:
    """The GGUF tensor(s) one Hugging Face tensor becomes (experts' ``gate_up_proj`` splits into two)."""
    last = hf_name.rsplit(".", 1)[-1]
    if value.dim() == 3 and last in EXPERT_SPLITS:
        block = re.search(r"\.(\d+)\.", hf_name)
        targets = EXPERT_SPLITS[last]
        step = _n_rows(value) // len(targets)
        return [(gguf.TENSOR_NAMES[t].format(bid=int(block.group(1)) if block else 0) + ".weight",
                 _rows(value, slice(i * step, (i + 1) * step))) for i, t in enumerate(targets)]
    name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
    if name is None and hf_name == "lm_head.weight":
        name = "output.weight"  # (families whose llama.cpp graph has no output tensor refuse it below)
    if name is None:
        raise ModelNotSupportedError(f"GGUF export: {hf_name!r} has no tensor in llama.cpp's "
                                     f"{family.arch.name.lower()} architecture.")
    return [(name, value)]


def transform(gguf_name: str, hf_name: str, value: Value, family: Family, d: Dims) -> Value:
    """Apply the family's row orders, norm offset and 1-D reshape to one tensor (see :mod:`.families`)."""
    tensor = gguf_name.split(".")[-2]
    if family.rope == "norm" and tensor in ("attn_q", "attn_k"):
        value = _rows(value, rope_rows(_n_rows(value), d.heads if tensor == "attn_q" else d.kv_heads))
    if family.qkv == "grouped" and tensor == "attn_qkv":
        if _n_rows(value) != (d.heads + 2 * d.kv_heads) * d.head_dim:
            raise ModelNotSupportedError(f"GGUF export: {hf_name} has {_n_rows(value)} rows, not (heads + 2 * "
                                         f"kv_heads) * head_dim = {(d.heads + 2 * d.kv_heads) * d.head_dim}.")
        value = _rows(value, grouped_qkv_rows(d))
    if family.norm_offset and hf_name.endswith("norm.weight"):
        value = value.detach().float() + family.norm_offset
    if gguf_name.split(".", 2)[-1] in family.vectors:
        value = (value.dequantize() if isinstance(value, Packed) else value.detach().float()).reshape(-1)
    return value


def encode(name: str, value: Value, float_type: Any) -> tuple[np.ndarray, gguf.GGMLQuantizationType | None]:
    """``(data, raw block type or None)`` for the writer: packed grids as their blocks, floats as ``float_type``."""
    if isinstance(value, Packed):
        qtype = block_type(value, name)
        return pack_blocks(value.codes, value.scales, value.zeros, value.group_size, qtype), qtype
    data = value.detach().float().cpu()
    if data.dim() > 1 and isinstance(float_type, gguf.GGMLQuantizationType):
        if data.shape[-1] % BLOCK:
            raise ConfigError(f"GGUF export dtype='q8_0': {name} has rows of {data.shape[-1]} values, not a "
                              f"multiple of {BLOCK}; use dtype='f16' or 'f32'.")
        return gguf.quants.quantize(data.numpy(), float_type), float_type
    return data.numpy().astype(float_type if data.dim() > 1 else np.float32), None
