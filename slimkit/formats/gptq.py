"""GPTQ checkpoints (the AutoGPTQ / GPTQModel layout that transformers, optimum, vLLM and TGI read).

One quantized Linear ``<name>`` (``in`` inputs, ``out`` outputs, ``pf = 32 / bits`` values per int32 word):

- ``<name>.qweight``: int32 ``[in / pf, out]``; word ``[i, j]`` holds code ``q[j, i * pf + k]`` (unsigned, in
  ``[0, 2**bits)``) in bits ``k * bits ..`` (packed along the INPUT dim, transposed);
- ``<name>.qzeros``: int32 ``[n_groups, out / pf]``; word ``[g, j]`` holds zero ``z[j * pf + k, g] - 1`` in bits
  ``k * bits ..`` (``checkpoint_format: "gptq"``, the v1 layout everyone reads, stores zero minus one; ``gptq_v2``
  stores the zero itself and is read too);
- ``<name>.scales``: float16 ``[n_groups, out]``; ``<name>.g_idx``: int32 ``[in]``, the group of each input column;
- ``<name>.bias`` when the layer has one.

The weight is ``(q - z) * s`` with ``z`` and ``s`` of group ``g_idx[i]``: slimkit's grid exactly. slimkit's act-order
GPTQ fixes its groups before reordering ("static groups"), so ``g_idx`` is ``i // group_size`` and ``desc_act`` is
false. A checkpoint whose ``g_idx`` is a real permutation (``desc_act: true`` without static groups) is refused
on import: slimkit's packed layers need consecutive groups.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from slimkit.engines.quantization.lowbit.linear import SCALE_DTYPE, PackedLinear
from slimkit.formats.hf_format import HFCheckpointFormat, quantizer_options
from slimkit.formats.kinds import FormatError
from slimkit.formats.scheme import FORMAT_BITS, GPTQ, WeightScheme, plain_linears

QUANT_METHOD = GPTQ
CHECKPOINT_FORMATS = (GPTQ, f"{GPTQ}_v2")


def _pack_words(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack unsigned ``values [..., n]`` (n a multiple of 32 / bits) along the last dim into int32 words."""
    pf = 32 // bits
    v = values.to(torch.int64).reshape(*values.shape[:-1], -1, pf)
    shifts = torch.arange(pf, dtype=torch.int64) * bits
    words = (v << shifts).sum(-1)  # disjoint bit ranges: sum == or; < 2**32
    return torch.from_numpy(words.numpy().astype(np.uint32).view(np.int32))


def _unpack_words(words: torch.Tensor, bits: int) -> torch.Tensor:
    """Invert :func:`_pack_words`: int32 ``[..., w]`` -> int64 ``[..., w * 32 / bits]`` unsigned values."""
    pf = 32 // bits
    w = torch.from_numpy(words.contiguous().numpy().view(np.uint32).astype(np.int64))
    shifts = torch.arange(pf, dtype=torch.int64) * bits
    return ((w.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)).reshape(*words.shape[:-1], -1)


def layer_tensors(layer: PackedLinear, scheme: WeightScheme, v1: bool = True) -> dict[str, torch.Tensor]:
    """The GPTQ tensors of one packed layer (local names ``qweight``, ``qzeros``, ``scales``, ``g_idx``[, ``bias``])."""
    codes = layer.codes()  # [out, in] unsigned
    zeros = layer.zeros.float().round().to(torch.int64)  # [out, groups]
    if v1:
        zeros = zeros - 1
    mask = (1 << scheme.bits) - 1
    group_size = layer.in_features if scheme.group_size is None else scheme.group_size
    out = {
        # pack the codes of each row along ``in`` ([out, in / pf]), then transpose to GPTQ's [in / pf, out]
        "qweight": _pack_words(codes, scheme.bits).t().contiguous(),
        "qzeros": _pack_words((zeros & mask).t().contiguous(), scheme.bits).contiguous(),
        "scales": layer.scales.detach().to(SCALE_DTYPE).t().contiguous(),
        "g_idx": (torch.arange(layer.in_features) // group_size).to(torch.int32),
    }
    if layer.bias is not None:
        out["bias"] = layer.bias.detach().clone()
    return out


def layer_from_tensors(tensors: dict[str, torch.Tensor], bits: int, name: str, v1: bool = True,
                       dtype: torch.dtype = torch.float32) -> PackedLinear:
    """Build a PackedLinear from one layer's GPTQ tensors, without re-quantizing."""
    for key in ("qweight", "qzeros", "scales"):
        if key not in tensors:
            raise FormatError(f"{name}: the checkpoint has {name}.qweight but no {name}.{key}.")
    qweight, qzeros, scales = tensors["qweight"], tensors["qzeros"], tensors["scales"]
    if qweight.dtype != torch.int32 or qzeros.dtype != torch.int32:
        raise FormatError(f"{name}: qweight/qzeros are {qweight.dtype}/{qzeros.dtype}; slimkit reads int32 packing "
                          "(pack_dtype int32).")
    pf = 32 // bits
    in_f, out_f = qweight.shape[0] * pf, qweight.shape[1]
    groups = scales.shape[0]
    if tuple(scales.shape) != (groups, out_f) or tuple(qzeros.shape) != (groups, out_f // pf):
        raise FormatError(f"{name}: scales {tuple(scales.shape)} / qzeros {tuple(qzeros.shape)} do not fit a "
                          f"qweight of {tuple(qweight.shape)} at {bits} bits.")
    g_idx = tensors.get("g_idx")
    group_size = -(-in_f // groups)
    expected = torch.arange(in_f) // group_size
    if g_idx is not None and not torch.equal(g_idx.to(torch.int64), expected):
        raise FormatError(f"{name}: g_idx is not consecutive groups of {group_size} (act-order without static groups, "
                          "desc_act: true); slimkit's packed layers need consecutive groups. Re-quantize with "
                          "static groups, or run this checkpoint in a GPTQ runtime.")
    codes = _unpack_words(qweight.t().contiguous(), bits).to(torch.uint8)  # [out, in]
    zeros = _unpack_words(qzeros, bits).t()  # [out, groups]
    if v1:
        zeros = zeros + 1
    if bool((zeros > (1 << bits) - 1).any()):
        raise FormatError(f"{name}: a v1 zero point wraps past {2**bits - 1} (stored zero - 1 = -1): the checkpoint "
                          "holds a zero of 0, which the 'gptq' layout cannot express.")
    bias = tensors.get("bias")
    return PackedLinear.from_quantized(codes, scales.t().to(SCALE_DTYPE), zeros.to(SCALE_DTYPE), bits,
                                       in_f if groups == 1 else group_size,
                                       bias=None if bias is None else bias.to(dtype), dtype=dtype)


def build_config(scheme: WeightScheme, not_converted: list[str], act_order: bool = False,
                 damp: float | None = None) -> dict[str, Any]:
    """The ``quantization_config`` of a GPTQ checkpoint (one scheme for every quantized layer)."""
    config: dict[str, Any] = {
        "quant_method": QUANT_METHOD, "bits": scheme.bits,
        "group_size": -1 if scheme.group_size is None else scheme.group_size,
        "desc_act": False, "static_groups": bool(act_order), "sym": scheme.sym, "true_sequential": True,
        "checkpoint_format": GPTQ, "pack_dtype": "int32", "lm_head": False,
        "modules_to_not_convert": sorted(not_converted),
    }
    if damp is not None:
        config["damp_percent"] = damp
    inside = [n for n in not_converted if n != "lm_head" and ".layers." in f".{n}"]
    if inside:  # layers inside the blocks that stay float: GPTQModel / vLLM's negative "dynamic" rules
        config["dynamic"] = {f"-:^{n.replace('.', '[.]')}$": {} for n in inside}
    return config


def _fail(field: str, got: Any, allowed: str) -> FormatError:
    return FormatError(f"quantization_config.{field} = {got!r}: slimkit imports {allowed}. Run this checkpoint in a "
                       "GPTQ runtime (vLLM, GPTQModel) instead.")


def parse_config(qc: Any) -> tuple[int, bool]:
    """``(bits, v1)`` from a GPTQ ``quantization_config``; refuses what slimkit cannot run, naming the field."""
    if not isinstance(qc, dict):
        raise _fail("(top level)", type(qc).__name__, "a JSON object")
    bits = qc.get("bits")
    if isinstance(bits, bool) or bits not in FORMAT_BITS:
        raise _fail("bits", bits, f"{' or '.join(map(str, FORMAT_BITS))}-bit GPTQ weights")
    group_size = qc.get("group_size", -1)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or (group_size < 1 and group_size != -1):
        raise _fail("group_size", group_size, "a positive group size or -1 (per-channel)")
    fmt = qc.get("checkpoint_format", qc.get("format", GPTQ))
    if fmt not in CHECKPOINT_FORMATS:
        raise _fail("checkpoint_format", fmt, f"{' or '.join(repr(f) for f in CHECKPOINT_FORMATS)} (int32 packing)")
    if qc.get("pack_dtype", "int32") not in ("int32", "torch.int32"):
        raise _fail("pack_dtype", qc.get("pack_dtype"), "int32 packing")
    if qc.get("dynamic"):
        positive = [k for k in qc["dynamic"] if not str(k).startswith("-:")]
        if positive:
            raise _fail("dynamic", {k: qc["dynamic"][k] for k in positive},
                        "per-module overrides that only skip modules ('-:' rules)")
    if qc.get("lm_head"):
        raise _fail("lm_head", qc["lm_head"], "checkpoints with a float lm_head (lm_head: false)")
    return int(bits), fmt == GPTQ


def is_gptq_layer(tensor_names: set[str], name: str) -> bool:
    """Whether layer ``name`` is stored GPTQ-quantized among the checkpoint's ``tensor_names``."""
    return f"{name}.qweight" in tensor_names


class GPTQFormat(HFCheckpointFormat):
    """The AutoGPTQ / GPTQModel layout (``qweight``, ``qzeros``, ``scales``, ``g_idx``)."""

    name = GPTQ
    title = GPTQ
    quant_method = QUANT_METHOD

    def layer_tensors(self, layer: PackedLinear, scheme: WeightScheme,  # noqa: D102
                      dtype: torch.dtype) -> dict[str, torch.Tensor]:
        return layer_tensors(layer, scheme)

    def quantization_config(self, schemes: dict[str, WeightScheme], group_sizes: dict[str, int],
                            ignore: list[str], smash_config: Any = None) -> dict[str, Any]:
        """GPTQ's one scheme for every layer; a FormatError when the layers' schemes differ."""
        distinct = set(schemes.values())
        sizes = {group_sizes[n] for n in schemes}
        if len(distinct) > 1 and len(sizes) == 1 and len({(s.bits, s.sym) for s in distinct}) == 1:
            # one group size, but rows shorter than it form a single group: GPTQ's g_idx expresses both
            first = next(iter(distinct))
            distinct = {WeightScheme(first.bits, sizes.pop(), first.sym)}
        if len(distinct) > 1:
            raise FormatError(f"gptq's config holds one bits/group_size/sym for every layer, but the layers use "
                              f"{', '.join(sorted(s.describe() for s in distinct))}; export to compressed-tensors "
                              "(one config group per scheme) instead.")
        return build_config(next(iter(distinct)), ignore, *quantizer_options(smash_config))

    def quantized_layers(self, model: nn.Module, qc: dict[str, Any],  # noqa: D102
                         names: set[str]) -> dict[str, Any]:
        how = parse_config(qc)
        return {n: how for n in plain_linears(model) if is_gptq_layer(names, n)}

    def layer_from_tensors(self, tensors: dict[str, torch.Tensor], how: Any, name: str,  # noqa: D102
                           dtype: torch.dtype, notes: list[str]) -> PackedLinear:
        bits, v1 = how
        return layer_from_tensors(tensors, bits, name, v1, dtype)

    def runtimes(self) -> list[str]:  # noqa: D102
        return [
            "- **transformers**: `AutoModelForCausalLM.from_pretrained(\"DIR\")` through its GPTQ loader, which needs "
            "`optimum` and `gptqmodel`.",
            "- **vLLM**: `vllm serve DIR` (GPTQ, `checkpoint_format: gptq`; not run in slimkit's own tests).",
        ]


__all__ = ["GPTQ", "QUANT_METHOD", "GPTQFormat", "build_config", "is_gptq_layer", "layer_from_tensors",
           "layer_tensors", "parse_config"]
