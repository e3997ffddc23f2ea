"""Write a (smashed) Hugging Face causal LM into one GGUF file that llama.cpp runs.

Supported: Llama-family (``LlamaForCausalLM``: Llama 2/3, SmolLM2, TinyLlama; GQA and tied embeddings included) and
Qwen2 (``Qwen2ForCausalLM``). Float matrices go out as F32, F16 or Q8_0 (llama.cpp's own round-to-nearest 8-bit,
``gguf.quants``: the choice for an embedding no slimkit quantizer touches); norms and biases stay F32. slimkit's packed
low-bit layers (rtn, hqq, gptq, awq) go out as the GGUF block type with the same grid, without re-quantizing
(:mod:`.blocks`). llama.cpp's ``llama`` architecture applies rotary embeddings to interleaved pairs, Hugging Face
to the two halves of each head: like llama.cpp's converter, the rows of ``q_proj`` (per query head) and ``k_proj``
(per key/value head) are reordered so that row ``2i`` / ``2i + 1`` of a head are Hugging Face rows ``i`` and
``i + head_dim / 2``. Qwen2 runs NeoX-style rotary in llama.cpp: no reordering. The tokenizer goes into the file.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from torch import nn

from slimkit.compression.gguf.blocks import BLOCK, block_type, pack_blocks, packed_rows
from slimkit.compression.gguf.vocab import add_tokenizer
from slimkit.compression.quantization.lowbit.linear import PackedLinear
from slimkit.core.io import atomic_file
from slimkit.errors import ConfigError, ModelNotSupportedError

#: Hugging Face ``model_type`` -> (class llama.cpp runs, GGUF architecture, reorder q/k rows for rotary)
ARCHITECTURES = {
    "llama": ("LlamaForCausalLM", gguf.MODEL_ARCH.LLAMA, True),
    "qwen2": ("Qwen2ForCausalLM", gguf.MODEL_ARCH.QWEN2, False),
}
#: type of the float (not slimkit-packed) matrices -> (numpy type or GGUF block type, file type when nothing is packed)
DTYPES = {"f32": (np.float32, gguf.LlamaFileType.ALL_F32), "f16": (np.float16, gguf.LlamaFileType.MOSTLY_F16),
          "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0)}
_FILE_TYPES = {gguf.GGMLQuantizationType.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0,
               gguf.GGMLQuantizationType.Q4_1: gguf.LlamaFileType.MOSTLY_Q4_1,
               gguf.GGMLQuantizationType.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0}
_LAYER_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                  "ffn_down")


class _Writer(gguf.GGUFWriter):
    """GGUFWriter that can also write an empty typed array (llama.cpp needs ``merges`` even when there are none)."""

    def _pack_val(self, val: Any, vtype: gguf.GGUFValueType, add_vtype: bool,
                  sub_type: gguf.GGUFValueType | None = None) -> bytes:
        if vtype == gguf.GGUFValueType.ARRAY and sub_type is not None and len(val) == 0:
            head = self._pack("I", vtype) if add_vtype else b""
            return head + self._pack("I", sub_type) + self._pack("Q", 0)
        return super()._pack_val(val, vtype, add_vtype, sub_type)


def supported_names() -> str:
    """``"LlamaForCausalLM (llama), Qwen2ForCausalLM (qwen2)"``: what the export accepts, for messages."""
    return ", ".join(f"{cls} ({kind})" for kind, (cls, _, _) in ARCHITECTURES.items())


def architecture(model: Any) -> str:
    """The model's Hugging Face ``model_type`` if llama.cpp runs it, else a ModelNotSupportedError with the list."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if not isinstance(model, nn.Module) or kind not in ARCHITECTURES or not hasattr(model, "lm_head"):
        raise ModelNotSupportedError(f"GGUF export supports {supported_names()} causal LMs; got "
                                     f"{type(model).__name__} (model_type={kind!r}).")
    return kind


def _check_config(kind: str, config: Any) -> dict[str, Any]:
    rope = dict(getattr(config, "rope_parameters", None) or {})
    theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    rope_type = rope.get("rope_type") or (getattr(config, "rope_scaling", None) or {}).get("rope_type", "default")
    problems = []
    if rope_type != "default":
        problems.append(f"rope type {rope_type!r} (only 'default' rotary embeddings are written)")
    if getattr(config, "hidden_act", "silu") != "silu":
        problems.append(f"hidden_act={config.hidden_act!r} (llama.cpp's {kind} uses silu)")
    if getattr(config, "mlp_bias", False):
        problems.append("mlp_bias=True")
    if getattr(config, "use_sliding_window", False):
        problems.append("use_sliding_window=True")
    if problems:
        raise ModelNotSupportedError(f"GGUF export of this {kind} model is not supported: {'; '.join(problems)}.")
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return dict(heads=heads, kv_heads=getattr(config, "num_key_value_heads", None) or heads, head_dim=head_dim,
                theta=float(theta))


def _rope_rows(n_rows: int, n_head: int) -> torch.Tensor:
    """Row order llama.cpp's converter gives q/k (``LlamaModel.permute``): per head, the halves interleaved."""
    return torch.arange(n_rows).view(n_head, 2, n_rows // n_head // 2).transpose(1, 2).reshape(-1)


def _write_metadata(writer: gguf.GGUFWriter, kind: str, config: Any, info: dict[str, Any]) -> None:
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(info["heads"])
    writer.add_head_count_kv(info["kv_heads"])
    writer.add_rope_freq_base(info["theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    if info["head_dim"] != config.hidden_size // info["heads"]:
        writer.add_key_length(info["head_dim"])
        writer.add_value_length(info["head_dim"])
    if kind == "llama":
        writer.add_vocab_size(config.vocab_size)
        writer.add_rope_dimension_count(info["head_dim"])


def _tensors(model: nn.Module, kind: str, info: dict[str, Any], dtype: str):
    """Yield ``(gguf name, numpy data, raw block type or None)`` for every tensor of the model."""
    names = gguf.get_tensor_name_map(ARCHITECTURES[kind][1], model.config.num_hidden_layers)
    permute = ARCHITECTURES[kind][2]
    float_type = DTYPES[dtype][0]
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        params = list(module.named_parameters(prefix=module_name, recurse=False))
        if isinstance(module, PackedLinear):
            params = [(f"{module_name}.weight", module)] + ([(f"{module_name}.bias", module.bias)]
                                                             if module.bias is not None else [])
        for hf_name, tensor in params:
            if id(tensor) in seen:  # a tied lm_head shares the embedding: llama.cpp reuses token_embd
                continue
            seen.add(id(tensor))
            name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
            if name is None:
                raise ModelNotSupportedError(f"GGUF export: {hf_name!r} ({type(module).__name__}) has no tensor in "
                                             f"llama.cpp's {kind} architecture.")
            rows = None
            if permute and hf_name.split(".")[-2] in ("q_proj", "k_proj"):
                rows = _rope_rows(module.out_features, info["heads" if "q_proj" in hf_name else "kv_heads"])
            if isinstance(tensor, PackedLinear):
                qtype = block_type(tensor, module_name)
                codes, scales, zeros = packed_rows(tensor, rows)
                yield name, pack_blocks(codes, scales, zeros, tensor.group_size, qtype), qtype
                continue
            data = tensor.detach().float().cpu()
            if rows is not None:
                data = data[rows]
            if data.dim() > 1 and isinstance(float_type, gguf.GGMLQuantizationType):
                if data.shape[-1] % BLOCK:
                    raise ConfigError(f"GGUF export dtype='q8_0': {hf_name} has rows of {data.shape[-1]} values, not a "
                                      f"multiple of {BLOCK}; use dtype='f16' or 'f32'.")
                yield name, gguf.quants.quantize(data.numpy(), float_type), float_type
                continue
            yield name, data.numpy().astype(float_type if data.dim() > 1 else np.float32), None


def export_gguf(model: nn.Module, path: str | os.PathLike, tokenizer: Any, dtype: str = "f32") -> dict[str, Any]:
    """Write ``model`` with ``tokenizer`` to the GGUF file ``path`` (atomically); return a summary.

    ``dtype`` (``"f32"``, ``"f16"`` or ``"q8_0"``) is the type of the float matrices (the embedding, an unquantized
    lm_head or layer); slimkit's packed layers keep their own block type.
    The summary has the architecture, the GGUF type of each tensor, the file type and the file size.
    """
    kind = architecture(model)
    if dtype not in DTYPES:
        raise ConfigError(f"GGUF export dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)}.")
    if tokenizer is None:
        raise ConfigError("GGUF export writes the tokenizer into the file; pass the model's tokenizer "
                          "(SmashConfig.add_tokenizer).")
    config = model.config
    info = _check_config(kind, config)
    types: dict[str, str] = {}
    with atomic_file(path, suffix=".gguf") as tmp:
        writer = _Writer(tmp, ARCHITECTURES[kind][1].name.lower())
        _write_metadata(writer, kind, config, info)
        add_tokenizer(writer, tokenizer, config.vocab_size)
        with torch.no_grad():
            for name, data, raw in _tensors(model, kind, info, dtype):
                writer.add_tensor(name, data, raw_dtype=raw)
                types[name] = (raw or gguf.GGMLQuantizationType[data.dtype.name.replace("float", "F")]).name
        _check_complete(types, config, kind)
        blocks = collections.Counter(t for t in types.values() if t.startswith("Q"))
        file_type = _FILE_TYPES[gguf.GGMLQuantizationType[blocks.most_common(1)[0][0]]] if blocks else \
            DTYPES[dtype][1]
        writer.add_file_type(file_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return dict(architecture=kind, tensor_types=types, file_type=file_type.name, bytes=Path(path).stat().st_size)


def _check_complete(types: dict[str, str], config: Any, kind: str) -> None:
    expected = ["token_embd.weight", "output_norm.weight"] + [
        f"blk.{i}.{t}.weight" for i in range(config.num_hidden_layers) for t in _LAYER_TENSORS]
    missing = [n for n in expected if n not in types]
    if missing:
        raise ModelNotSupportedError(f"GGUF export: the {kind} model has no float or slimkit-packed weight for "
                                     f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}: a layer was "
                                     "replaced by a module GGUF cannot store (e.g. a torch.ao quantized Linear). "
                                     "Use slimkit's rtn/hqq/gptq/awq quantizers before exporting.")
