"""Write a (smashed) Hugging Face causal LM into one GGUF file that llama.cpp runs.

Supported: every family of :data:`~.families.FAMILIES` (Llama, Mistral, Granite, Mixtral, OLMo, Qwen2, Qwen3,
Qwen2-MoE, Gemma, Gemma 2, Phi-3, GPT-2, GPT-NeoX, Falcon, StableLM), MoE experts included. One table says what
llama.cpp needs of each (:mod:`.families`); this module writes the metadata it lists, the tensors as
:mod:`.tensors` names and transforms them, and the tokenizer, then checks that the file holds every tensor
llama.cpp's graph requires and nothing it would not read. Float matrices go out as F32, F16 or Q8_0 (llama.cpp's
own round-to-nearest 8-bit, ``gguf.quants``: the choice for an embedding no slimkit quantizer touches); norms and
biases stay F32. slimkit's packed low-bit layers (rtn, hqq, gptq, awq) go out as the GGUF block type with the same
grid, without re-quantizing (:mod:`.blocks`); one that lands on a tensor llama.cpp holds 1-D (Qwen2-MoE's
shared-expert gate) is written as its dequantized F32 values. Where llama.cpp's graph runs full attention over a
family's sliding window (Mistral, Mixtral, Phi-3, Qwen2 with ``use_sliding_window``), the summary's
``context_limit`` says up to how many tokens the file computes the same function as the model.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from torch import nn

from slimkit.core.io import atomic_file
from slimkit.engines.gguf.families import FAMILIES, Dims, Family, dims, rope_parameters, supported_names
from slimkit.engines.gguf.tensors import Value, encode, gguf_names, hf_tensors, transform
from slimkit.engines.gguf.vocab import add_tokenizer
from slimkit.errors import ConfigError, ModelNotSupportedError

#: type of the float (not slimkit-packed) matrices -> (numpy type or GGUF block type, file type when nothing is packed)
DTYPES = {"f32": (np.float32, gguf.LlamaFileType.ALL_F32), "f16": (np.float16, gguf.LlamaFileType.MOSTLY_F16),
          "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0)}
_FILE_TYPES = {gguf.GGMLQuantizationType.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0,
               gguf.GGMLQuantizationType.Q4_1: gguf.LlamaFileType.MOSTLY_Q4_1,
               gguf.GGMLQuantizationType.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0}


class _Writer(gguf.GGUFWriter):
    """GGUFWriter that can also write an empty typed array (llama.cpp needs ``merges`` even when there are none)."""

    def _pack_val(self, val: Any, vtype: gguf.GGUFValueType, add_vtype: bool,
                  sub_type: gguf.GGUFValueType | None = None) -> bytes:
        if vtype == gguf.GGUFValueType.ARRAY and sub_type is not None and len(val) == 0:
            head = self._pack("I", vtype) if add_vtype else b""
            return head + self._pack("I", sub_type) + self._pack("Q", 0)
        return super()._pack_val(val, vtype, add_vtype, sub_type)


def architecture(model: Any) -> str:
    """The model's Hugging Face ``model_type`` if llama.cpp runs it, else a ModelNotSupportedError with the list."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if not isinstance(model, nn.Module) or kind not in FAMILIES or not hasattr(model, "lm_head"):
        raise ModelNotSupportedError(f"GGUF export supports {supported_names()} causal LMs; got "
                                     f"{type(model).__name__} (model_type={kind!r}).")
    return kind


def check_config(kind: str, config: Any) -> Dims:
    """The model's :class:`Dims`, or a ModelNotSupportedError naming every setting llama.cpp cannot reproduce."""
    family, d = FAMILIES[kind], dims(config)
    rope_type = rope_parameters(config)["rope_type"]
    problems = [what for what, present in family.refuse if present(config)]
    if rope_type != "default" and family.rope != "none":
        problems.append(f"rope type {rope_type!r} (only 'default' rotary embeddings are written)")
    if family.q_is_hidden and d.heads * d.head_dim != d.hidden:
        problems.append(f"heads * head_dim = {d.heads * d.head_dim} != hidden_size = {d.hidden} (llama.cpp's "
                        f"{family.arch.name.lower()} sizes attention by hidden_size)")
    if family.rope != "none" and not family.partial_rotary and d.rope_dim != d.head_dim:
        problems.append(f"partial rotary embeddings ({d.rope_dim} of {d.head_dim} dimensions)")
    if problems:
        raise ModelNotSupportedError(f"GGUF export of this {family.hf_class} is not supported: {'; '.join(problems)}.")
    return d


def _write_metadata(writer: gguf.GGUFWriter, family: Family, d: Dims, config: Any) -> None:
    writer.add_block_count(d.layers)
    writer.add_context_length(d.ctx)
    writer.add_embedding_length(d.hidden)
    writer.add_feed_forward_length(d.ffn)
    writer.add_head_count(d.heads)
    writer.add_head_count_kv(d.kv_heads)
    if family.rope != "none":
        writer.add_rope_freq_base(d.theta)
    if d.head_dim != d.hidden // d.heads:
        writer.add_key_length(d.head_dim)
        writer.add_value_length(d.head_dim)
    for method, value in family.keys:
        got = value(d, config)
        if got is not None:
            getattr(writer, method)(got)


class GGUFLayout:
    """One model's GGUF file as llama.cpp reads it, validated once: family, sizes, tensor names, float type.

    The in-memory export (:func:`export_gguf`) and the piece-by-piece writer (:mod:`slimkit.formats`) both name
    and check the tensors with :meth:`tensors`, open the file with :meth:`open_file` and close its tensor list with
    :meth:`file_type`; they differ only in how the tensor bytes reach the file.
    """

    def __init__(self, model: nn.Module, tokenizer: Any, dtype: str = "f32") -> None:
        self.kind = architecture(model)
        if dtype not in DTYPES:
            raise ConfigError(f"GGUF export dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)}.")
        if tokenizer is None:
            raise ConfigError("GGUF export writes the tokenizer into the file; pass the model's tokenizer "
                              "(SmashConfig.add_tokenizer, or a tokenizer in the model folder).")
        self.family, self.config, self.tokenizer, self.dtype = FAMILIES[self.kind], model.config, tokenizer, dtype
        self.dims = check_config(self.kind, self.config)
        self.float_type = DTYPES[dtype][0]
        self.names = gguf.get_tensor_name_map(self.family.arch, self.dims.layers)
        self.allowed = _allowed(self.family, self.dims)

    def tensors(self, module: nn.Module, prefix: str = "",
                tied: frozenset[str] | dict[str, str] = frozenset()) -> Iterator[tuple[str, str, Value]]:
        """``(gguf name, hf name, value)`` of ``module``'s tensors (at dotted ``prefix``), transformed, in order.

        ``tied``: full names of tensors tied to one written before (with another piece); a tied lm_head is left
        out (llama.cpp reuses token_embd) unless the family needs its own output.
        """
        family, first = self.family, {}
        for name, value, identity in hf_tensors(module):
            full = f"{prefix}.{name.lstrip('.')}" if prefix else name.lstrip(".")
            if (full in tied or first.setdefault(identity, full) != full) and (
                    family.output != "required" or not full.startswith("lm_head")):
                continue
            for gguf_name, part in gguf_names(full, value, family, self.names):
                if gguf_name == "output.weight" and family.output == "tied":
                    raise ModelNotSupportedError(
                        f"GGUF export: llama.cpp's {family.arch.name.lower()} reuses the embedding as its output "
                        f"layer, but {full} is a tensor of its own (untied, or quantized apart from the embedding); "
                        "keep lm_head tied and unquantized (the quantizers exclude it by default).")
                if gguf_name not in self.allowed:
                    raise ModelNotSupportedError(
                        f"GGUF export: {full} would be {gguf_name}, which llama.cpp's {family.arch.name.lower()} does "
                        f"not read (it reads, per layer: {', '.join(family.layer + family.optional)}); this "
                        f"{family.hf_class} has a setting llama.cpp's graph lacks.")
                yield gguf_name, full, transform(gguf_name, full, part, family, self.dims)

    def open_file(self, path: str | os.PathLike) -> gguf.GGUFWriter:
        """A GGUF writer on ``path`` with the family's metadata and the tokenizer added."""
        writer = _Writer(path, gguf.MODEL_ARCH_NAMES[self.family.arch])
        _write_metadata(writer, self.family, self.dims, self.config)
        add_tokenizer(writer, self.tokenizer, self.dims.vocab)
        return writer

    def file_type(self, types: dict[str, str]) -> gguf.LlamaFileType:
        """Check that ``types`` (GGUF name -> type name) holds every tensor llama.cpp needs; the file's type."""
        _check_complete(types, self.family, self.dims)
        blocks = collections.Counter(t for t in types.values() if t.startswith("Q"))
        return _FILE_TYPES[gguf.GGMLQuantizationType[blocks.most_common(1)[0][0]]] if blocks else \
            DTYPES[self.dtype][1]

    def summary(self, types: dict[str, str], file_type: gguf.LlamaFileType, path: Path) -> dict[str, Any]:
        """What an export reports: architectures, tensor types, file type, size, context limit."""
        d = self.dims
        limit = min(d.ctx, d.window) if d.window and not self.family.native_window else d.ctx
        return dict(architecture=self.kind, gguf_architecture=gguf.MODEL_ARCH_NAMES[self.family.arch],
                    tensor_types=types, file_type=file_type.name, bytes=Path(path).stat().st_size,
                    context_limit=limit)


def export_gguf(model: nn.Module, path: str | os.PathLike, tokenizer: Any, dtype: str = "f32") -> dict[str, Any]:
    """Write ``model`` with ``tokenizer`` to the GGUF file ``path`` (atomically); return a summary.

    ``dtype`` (``"f32"``, ``"f16"`` or ``"q8_0"``) is the type of the float matrices (the embedding, an unquantized
    lm_head or layer); slimkit's packed layers keep their own block type. The summary has the Hugging Face
    ``architecture`` (model_type), the ``gguf_architecture``, the GGUF type of each tensor, the file type, the file
    size and ``context_limit`` (tokens up to which llama.cpp computes what the model computes).
    """
    layout = GGUFLayout(model, tokenizer, dtype)
    types: dict[str, str] = {}
    with atomic_file(path, suffix=".gguf") as tmp:
        writer = layout.open_file(tmp)
        with torch.no_grad():
            for name, hf_name, value in layout.tensors(model):
                data, raw = encode(hf_name, value, layout.float_type)
                writer.add_tensor(name, data, raw_dtype=raw)
                types[name] = (raw or gguf.GGMLQuantizationType[data.dtype.name.replace("float", "F")]).name
        file_type = layout.file_type(types)
        writer.add_file_type(file_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return layout.summary(types, file_type, Path(path))


def _required(family: Family, d: Dims) -> list[str]:
    return list(family.top) + (["output.weight"] if family.output == "required" else []) + [
        f"blk.{i}.{t}" for i in range(d.layers) for t in family.layer]


def _allowed(family: Family, d: Dims) -> set[str]:
    extra = ["output.weight"] if family.output == "optional" else []
    return set(_required(family, d) + extra + [f"blk.{i}.{t}" for i in range(d.layers) for t in family.optional])


def _check_complete(types: dict[str, str], family: Family, d: Dims) -> None:
    missing = [n for n in _required(family, d) if n not in types]
    if missing:
        raise ModelNotSupportedError(f"GGUF export: the {family.hf_class} has no float or slimkit-packed weight for "
                                     f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}, which llama.cpp's "
                                     f"{family.arch.name.lower()} requires: a layer was replaced by a module GGUF "
                                     "cannot store (e.g. a torch.ao quantized Linear; use slimkit's rtn/hqq/gptq/awq "
                                     "quantizers before exporting), or the model lacks a tensor the graph needs.")
