"""What llama.cpp needs of each Hugging Face causal-LM family: one table, read by the GGUF writer.

Each :class:`Family` row says which GGUF architecture llama.cpp runs the family as, which tensors that
architecture loads (required per layer, optional per layer, required at the top), which metadata keys it reads,
how Hugging Face's tensors are transformed on the way (the rows of ``q``/``k`` for llama-style rotary, the row
layout of a fused ``query_key_value``, Gemma's ``1 + w`` norms, where the ``lm_head`` goes) and which settings
llama.cpp's graph for it cannot reproduce. Tensor names come from the ``gguf`` package (``gguf.TENSOR_NAMES`` via
its Hugging Face name map); the facts follow llama.cpp's ``convert_hf_to_gguf`` and its ``src/models/*.cpp``.

Transforms, by GGUF tensor (the writer applies them to float and packed weights alike; all of them only select
or reorder rows, so packed low-bit rows move with their scales and zeros):

- ``rope="norm"``: llama.cpp rotates interleaved pairs, Hugging Face the two halves of each head, so the rows of
  ``attn_q`` (per query head) and ``attn_k`` (per key/value head), weights and biases, are reordered: row ``2i`` /
  ``2i + 1`` of a head are Hugging Face rows ``i`` / ``i + head_dim / 2``. ``"neox"`` families need nothing.
- ``qkv="grouped"``: the fused ``attn_qkv`` is held per key/value group, ``[kv, q_per_kv + 2, head_dim]`` rows
  (GPT-NeoX: ``[heads, 3, head_dim]``; Falcon: ``kv`` = 1 for multi-query); llama.cpp wants ``[q; k; v]``.
  ``"concat"`` (GPT-2's ``c_attn``, Phi-3's ``qkv_proj``) is already ``[q; k; v]``.
- Experts (transformers 5 keeps them as 3-D ``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``): ``gate_up_proj``
  is split into ``ffn_gate_exps`` (its first ``I`` rows of each expert) and ``ffn_up_exps``, see :data:`EXPERT_SPLITS`.
- ``norm_offset``: Gemma stores RMSNorm weights as ``w - 1`` (it multiplies by ``1 + w``); llama.cpp multiplies by
  the stored weight, so ``1`` is added to every ``*norm.weight`` (as llama.cpp's converter does).
- ``vectors``: tensors llama.cpp holds 1-D that Hugging Face holds as ``[1, n]`` (Qwen2-MoE's shared-expert gate).
- ``output``: ``"optional"``: the ``lm_head`` is written unless tied (llama.cpp then reuses ``token_embd``);
  ``"required"``: written even when tied; ``"tied"``: llama.cpp always reuses ``token_embd`` (Gemma), so the model
  must tie its ``lm_head``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gguf

T = gguf.MODEL_TENSOR
#: an experts module's 3-D parameter -> the GGUF tensors its rows are split into, in order (equal row counts)
EXPERT_SPLITS: dict[str, tuple[gguf.MODEL_TENSOR, ...]] = {
    "gate_up_proj": (T.FFN_GATE_EXP, T.FFN_UP_EXP), "down_proj": (T.FFN_DOWN_EXP,),
    "gate_proj": (T.FFN_GATE_EXP,), "up_proj": (T.FFN_UP_EXP,)}


@dataclass(frozen=True)
class Dims:
    """The sizes every family's metadata is written from, read once from a Hugging Face config."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    ctx: int
    vocab: int
    theta: float
    rope_dim: int  #: rotated dimensions per head (``head_dim * partial_rotary_factor``)
    eps: float
    window: int | None  #: the sliding-attention window, when the config uses one


def _first(config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def rope_parameters(config: Any) -> dict[str, Any]:
    """The ``rope_parameters`` of transformers 5 (or the older ``rope_scaling`` plus ``rope_theta``) as one dict."""
    rope = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    rope.setdefault("rope_theta", _first(config, "rope_theta", "rotary_emb_base", default=10000.0))
    rope.setdefault("rope_type", rope.get("type", "default"))
    return rope


def dims(config: Any) -> Dims:
    """The :class:`Dims` of a Hugging Face config (GPT-2's ``n_embd``... resolve through its attribute map)."""
    heads, hidden = config.num_attention_heads, config.hidden_size
    head_dim = _first(config, "head_dim", default=hidden // heads)
    if hasattr(config, "multi_query"):  # Falcon: one key/value head unless the new decoder or plain multi-head
        multi = config.multi_query and not getattr(config, "new_decoder_architecture", False)
        kv = 1 if multi else _first(config, "num_kv_heads", default=heads)
    else:
        kv = _first(config, "num_key_value_heads", default=heads)
    rope = rope_parameters(config)
    partial = rope.get("partial_rotary_factor", _first(config, "partial_rotary_factor", "rotary_pct", default=1.0))
    window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
    return Dims(layers=config.num_hidden_layers, hidden=hidden, heads=heads, kv_heads=kv, head_dim=head_dim,
                ffn=_first(config, "ffn_hidden_size", "intermediate_size", "n_inner", default=4 * hidden),
                ctx=config.max_position_embeddings, vocab=config.vocab_size, theta=float(rope["rope_theta"]),
                rope_dim=int(head_dim * partial),
                eps=float(_first(config, "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", default=1e-5)),
                window=int(window) if window else None)


def activation(config: Any) -> str | None:
    """The MLP activation's name, whatever the family calls the setting."""
    return _first(config, "hidden_act", "hidden_activation", "activation", "activation_function")


#: a metadata key: the ``gguf.GGUFWriter.add_*`` method and its value from (dims, config); None skips the key
Key = tuple[str, Callable[[Dims, Any], Any]]
#: a setting llama.cpp's graph cannot reproduce: what it is, and a test on the config that is True when present
Refusal = tuple[str, Callable[[Any], bool]]

RMS: Key = ("add_layer_norm_rms_eps", lambda d, c: d.eps)
LN: Key = ("add_layer_norm_eps", lambda d, c: d.eps)
ROPE_DIM: Key = ("add_rope_dimension_count", lambda d, c: d.rope_dim)
EXPERTS: tuple[Key, ...] = (("add_expert_count", lambda d, c: _first(c, "num_local_experts", "num_experts")),
                            ("add_expert_used_count", lambda d, c: c.num_experts_per_tok))


def _act(*allowed: str) -> Refusal:
    return (f"an activation other than {' / '.join(allowed)} (llama.cpp's graph has that one)",
            lambda c: activation(c) not in allowed)


SILU, GELU = _act("silu"), _act("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast")

ATTN = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight")
QKV_BIAS = ("attn_q.bias", "attn_k.bias", "attn_v.bias")
MLP = ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")
MLP_BIAS = ("ffn_gate.bias", "ffn_up.bias", "ffn_down.bias")
LLAMA = ("attn_norm.weight", *ATTN, "ffn_norm.weight", *MLP)
MOE = ("attn_norm.weight", *ATTN, "ffn_norm.weight", "ffn_gate_inp.weight", "ffn_gate_exps.weight",
       "ffn_up_exps.weight", "ffn_down_exps.weight")
LN_BLOCK = ("attn_norm.weight", "attn_norm.bias", "attn_qkv.weight", "attn_qkv.bias", "attn_output.weight",
            "attn_output.bias", "ffn_norm.weight", "ffn_norm.bias", "ffn_up.weight", "ffn_up.bias", "ffn_down.weight",
            "ffn_down.bias")
LN_TOP = ("token_embd.weight", "output_norm.weight", "output_norm.bias")


@dataclass(frozen=True)
class Family:
    """How one Hugging Face ``model_type`` becomes a GGUF file llama.cpp runs (see the module docstring)."""

    hf_class: str  #: the transformers class, for messages
    arch: gguf.MODEL_ARCH  #: the GGUF architecture llama.cpp runs it as
    layer: tuple[str, ...]  #: per-layer tensors llama.cpp requires (``"attn_q.weight"`` for ``blk.{i}.attn_q.weight``)
    optional: tuple[str, ...] = ()  #: per-layer tensors llama.cpp reads when present
    top: tuple[str, ...] = ("token_embd.weight", "output_norm.weight")  #: required tensors outside the layers
    output: str = "optional"  #: ``lm_head``: "optional", "required" or "tied"
    rope: str = "neox"  #: "norm" (q/k rows reordered), "neox" or "none"
    qkv: str = "concat"  #: row layout of a fused ``attn_qkv``: "concat" or "grouped"
    norm_offset: float = 0.0  #: added to every ``*norm.weight``
    vectors: tuple[str, ...] = ()  #: tensors written 1-D although Hugging Face holds ``[1, n]``
    q_is_hidden: bool = False  #: llama.cpp sizes ``attn_q``/``attn_output`` by ``hidden_size``
    partial_rotary: bool = False  #: llama.cpp rotates ``rope_dim < head_dim`` dimensions (else it needs them equal)
    native_window: bool = False  #: llama.cpp runs the sliding window; else the file is exact up to the window
    keys: tuple[Key, ...] = ()  #: metadata beyond the common sizes
    refuse: tuple[Refusal, ...] = ()  #: settings llama.cpp's graph for it cannot reproduce


_llama = dict(arch=gguf.MODEL_ARCH.LLAMA, layer=LLAMA, optional=(*QKV_BIAS, "attn_output.bias", *MLP_BIAS),
              rope="norm", keys=(RMS, ("add_vocab_size", lambda d, c: d.vocab)), refuse=(SILU,))
_gemma_refuse = (GELU, ("an untied lm_head (llama.cpp's gemma reuses the embedding)",
                        lambda c: not c.tie_word_embeddings))

#: Hugging Face ``model_type`` -> :class:`Family`
FAMILIES: dict[str, Family] = {
    "llama": Family("LlamaForCausalLM", **_llama),
    "mistral": Family("MistralForCausalLM", **_llama),
    "granite": Family("GraniteForCausalLM", **{**_llama, "arch": gguf.MODEL_ARCH.GRANITE, "keys": (
        RMS, ("add_attention_scale", lambda d, c: c.attention_multiplier),
        ("add_embedding_scale", lambda d, c: c.embedding_multiplier),
        ("add_residual_scale", lambda d, c: c.residual_multiplier),
        ("add_logit_scale", lambda d, c: c.logits_scaling))}),
    "mixtral": Family("MixtralForCausalLM", **{**_llama, "layer": MOE, "optional": (*QKV_BIAS, "attn_output.bias"),
                                               "keys": (RMS, *EXPERTS)}),
    "olmo": Family("OlmoForCausalLM", arch=gguf.MODEL_ARCH.OLMO, layer=(*ATTN, *MLP), optional=QKV_BIAS,
                   top=("token_embd.weight",), rope="norm", q_is_hidden=True, refuse=(SILU,),
                   keys=(("add_layer_norm_eps", lambda d, c: 1e-5), ("add_clamp_kqv", lambda d, c: c.clip_qkv))),
    "qwen2": Family("Qwen2ForCausalLM", arch=gguf.MODEL_ARCH.QWEN2, layer=LLAMA, optional=QKV_BIAS,
                    q_is_hidden=True, keys=(RMS,), refuse=(SILU,)),
    "qwen3": Family("Qwen3ForCausalLM", arch=gguf.MODEL_ARCH.QWEN3, layer=(*LLAMA, "attn_q_norm.weight",
                    "attn_k_norm.weight"), optional=QKV_BIAS, keys=(RMS,), refuse=(SILU,)),
    "qwen2_moe": Family(
        "Qwen2MoeForCausalLM", arch=gguf.MODEL_ARCH.QWEN2MOE, optional=QKV_BIAS, output="required", q_is_hidden=True,
        layer=(*MOE, "ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
               "ffn_down_shexp.weight"), vectors=("ffn_gate_inp_shexp.weight",),
        keys=(RMS, *EXPERTS, ("add_expert_feed_forward_length", lambda d, c: c.moe_intermediate_size),
              ("add_expert_shared_feed_forward_length", lambda d, c: c.shared_expert_intermediate_size)),
        refuse=(SILU, ("norm_topk_prob=True (llama.cpp's qwen2moe does not renormalize the top-k weights)",
                       lambda c: bool(getattr(c, "norm_topk_prob", False))),
                ("dense MLP layers (decoder_sparse_step > 1 or mlp_only_layers)",
                 lambda c: getattr(c, "decoder_sparse_step", 1) != 1 or bool(getattr(c, "mlp_only_layers", []))))),
    "gemma": Family("GemmaForCausalLM", arch=gguf.MODEL_ARCH.GEMMA, layer=LLAMA, optional=QKV_BIAS, output="tied",
                    norm_offset=1.0, keys=(RMS,), refuse=_gemma_refuse),
    "gemma2": Family(
        "Gemma2ForCausalLM", arch=gguf.MODEL_ARCH.GEMMA2, optional=QKV_BIAS, output="tied", norm_offset=1.0,
        layer=(*LLAMA, "post_attention_norm.weight", "post_ffw_norm.weight"), native_window=True,
        keys=(RMS, ("add_attn_logit_softcapping", lambda d, c: c.attn_logit_softcapping),
              ("add_final_logit_softcapping", lambda d, c: c.final_logit_softcapping),
              ("add_sliding_window", lambda d, c: d.window),
              ("add_sliding_window_pattern", lambda d, c: [t == "sliding_attention" for t in c.layer_types]
               if getattr(c, "layer_types", None) else None)),
        refuse=(*_gemma_refuse, ("query_pre_attn_scalar != head_dim (llama.cpp scales queries by 1/sqrt(head_dim))",
                                 lambda c: c.query_pre_attn_scalar != dims(c).head_dim),
                ("no attention or final logit soft-capping (llama.cpp's gemma2 always soft-caps)",
                 lambda c: c.attn_logit_softcapping is None or c.final_logit_softcapping is None))),
    "phi3": Family("Phi3ForCausalLM", arch=gguf.MODEL_ARCH.PHI3, q_is_hidden=True, partial_rotary=True, refuse=(SILU,),
                   layer=("attn_norm.weight", "attn_qkv.weight", "attn_output.weight", "ffn_norm.weight",
                          "ffn_up.weight", "ffn_down.weight"), optional=("attn_qkv.bias",),
                   keys=(RMS, ROPE_DIM, ("add_rope_scaling_orig_ctx_len", lambda d, c: _first(
                       c, "original_max_position_embeddings", default=d.ctx)))),
    "gpt2": Family("GPT2LMHeadModel", arch=gguf.MODEL_ARCH.GPT2, layer=LN_BLOCK, rope="none", q_is_hidden=True,
                   top=(*LN_TOP, "position_embd.weight"), keys=(LN,),
                   refuse=(GELU, ("scale_attn_by_inverse_layer_idx=True",
                                  lambda c: bool(getattr(c, "scale_attn_by_inverse_layer_idx", False))))),
    "gpt_neox": Family("GPTNeoXForCausalLM", arch=gguf.MODEL_ARCH.GPTNEOX, layer=LN_BLOCK, top=LN_TOP,
                       output="required", qkv="grouped", q_is_hidden=True, partial_rotary=True, refuse=(GELU,),
                       keys=(LN, ROPE_DIM, ("add_parallel_residual", lambda d, c: bool(c.use_parallel_residual)))),
    "falcon": Family(
        "FalconForCausalLM", arch=gguf.MODEL_ARCH.FALCON, top=LN_TOP, qkv="grouped", q_is_hidden=True, keys=(LN,),
        layer=("attn_norm.weight", "attn_norm.bias", "attn_qkv.weight", "attn_output.weight", "ffn_up.weight",
               "ffn_down.weight"), optional=("attn_norm_2.weight", "attn_norm_2.bias"),
        refuse=(GELU, ("alibi=True (llama.cpp's falcon uses rotary embeddings)", lambda c: bool(c.alibi)),
                ("bias=True (llama.cpp's falcon has no linear biases)", lambda c: bool(c.bias)),
                ("parallel_attn=False (llama.cpp's falcon runs attention and MLP in parallel)",
                 lambda c: not c.parallel_attn))),
    "stablelm": Family(
        "StableLmForCausalLM", arch=gguf.MODEL_ARCH.STABLELM, top=LN_TOP, output="required", q_is_hidden=True,
        partial_rotary=True,
        layer=("attn_norm.weight", "attn_norm.bias", *ATTN, *MLP), optional=(*QKV_BIAS, "ffn_norm.weight",
                                                                              "ffn_norm.bias"),
        keys=(LN, ROPE_DIM), refuse=(SILU, ("qk_layernorm=True (per-head norms are not written yet)",
                                            lambda c: bool(getattr(c, "qk_layernorm", False))))),
}


def supported_names() -> str:
    """``"LlamaForCausalLM (llama), MistralForCausalLM (mistral), ..."``: what the export accepts, for messages."""
    return ", ".join(f"{f.hf_class} ({kind})" for kind, f in FAMILIES.items())
