"""Every family's GGUF file read back with the gguf package: architecture, metadata, tensor names, shapes, types and
values equal to the Hugging Face weights after the documented transforms (no llama.cpp needed).

The expected tensors are rebuilt here the way llama.cpp's converter writes them (reshape-and-swap for the rotary
rows, per-group views for fused qkv, ``chunk`` for the experts), not with the exporter's own helpers.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
import transformers
from transformers.pytorch_utils import Conv1D

from slimkit.engines.gguf import FAMILIES, PACKED, export_gguf
from slimkit.engines.quantization.experts import DOWN, FIRST
from slimkit.engines.quantization.lowbit import PackedLinear, quantize_model_rtn
from slimkit.engines.quantization.lowbit.experts import PackedExperts as SlimkitPackedExperts
from tests.engines.gguf.conftest import FAMILIES as KINDS
from tests.engines.gguf.conftest import PackedExperts, build, pack_experts

NORM_ROPE = {"llama", "mistral", "granite", "mixtral", "olmo"}  # llama.cpp rotates interleaved pairs
KV = {"falcon": 1, "gpt2": 4, "gpt_neox": 4}  # the tiny configs' key/value heads (others: 2)
FFN = {"falcon": 256, "gpt2": 256}  # the tiny configs' MLP width (others: 128)
#: metadata each tiny config must produce, beyond the common sizes (key without the "{arch}." prefix)
EXTRA_KEYS = {
    "mixtral": {"expert_count": 4, "expert_used_count": 2},
    "qwen2_moe": {"expert_count": 4, "expert_used_count": 2, "expert_feed_forward_length": 64,
                  "expert_shared_feed_forward_length": 96},
    "granite": {"attention.scale": 0.2, "embedding_scale": 2.0, "residual_scale": 0.5, "logit_scale": 2.0},
    "olmo": {"attention.clamp_kqv": 1.0, "attention.layer_norm_epsilon": 1e-5},
    "gemma2": {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "attention.sliding_window": 64},
    "phi3": {"rope.dimension_count": 16, "rope.scaling.original_context_length": 128},
    "gpt_neox": {"rope.dimension_count": 4, "use_parallel_residual": True},
    "stablelm": {"rope.dimension_count": 4},
    "qwen3": {"attention.key_length": 32, "attention.value_length": 32},
    "gemma": {"attention.key_length": 32},
}


def _field(reader, key):
    return reader.fields[key].contents()


def _hf_weights(model) -> dict[str, torch.Tensor]:
    """Every weight as float ``[out, in]`` (Conv1D transposed, packed layers dequantized); a tied lm_head appears
    as ``lm_head.weight`` only when it is a tensor of its own."""
    out, seen = {}, set()
    for path, module in model.named_modules():
        if isinstance(module, PackedLinear):
            out[f"{path}.weight"] = module.dequantize(torch.float32)
            if module.bias is not None:
                out[f"{path}.bias"] = module.bias.detach().float()
            continue
        if isinstance(module, SlimkitPackedExperts):  # slimkit's packed experts: [E, out, in] per projection
            for which in (FIRST, DOWN):
                out[f"{path}.{module.buffer_prefix(which)}"] = torch.stack(
                    [module.dequantize(which, e, torch.float32) for e in range(module.num_experts)])
            continue
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            w = p.detach().float()
            out[f"{path}.{name}"] = w.t() if isinstance(module, Conv1D) and name == "weight" else w
    return out


def _converter_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _grouped_qkv(w: torch.Tensor, heads: int, kv: int, head_dim: int) -> torch.Tensor:
    g = w.reshape(kv, heads // kv + 2, head_dim, *w.shape[1:])
    return torch.cat([g[:, :-2].reshape(-1, *w.shape[1:]), g[:, -2].reshape(-1, *w.shape[1:]),
                      g[:, -1].reshape(-1, *w.shape[1:])]).reshape(w.shape)


def expected_tensors(kind: str, model) -> dict[str, np.ndarray]:
    """The float value of every tensor llama.cpp's converter would write for ``model``."""
    family, c = FAMILIES[kind], model.config
    heads, head_dim = c.num_attention_heads, getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv = KV.get(kind, 2)
    names = gguf.get_tensor_name_map(family.arch, c.num_hidden_layers)
    out = {}
    for hf, w in _hf_weights(model).items():
        if w.dim() == 3:  # experts [E, out, in]
            block = hf.split(".")[2]
            if hf.endswith("gate_up_proj"):
                gate, up = w.chunk(2, dim=1)
                out[f"blk.{block}.ffn_gate_exps.weight"], out[f"blk.{block}.ffn_up_exps.weight"] = gate, up
            else:
                out[f"blk.{block}.ffn_down_exps.weight"] = w
            continue
        name = "output.weight" if hf == "lm_head.weight" else names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if kind in NORM_ROPE and name.split(".")[-2] in ("attn_q", "attn_k"):
            w = _converter_permute(w, heads if ".attn_q." in name else kv)
        if kind in ("gpt_neox", "falcon") and ".attn_qkv." in name:
            w = _grouped_qkv(w, heads, kv, head_dim)
        if kind in ("gemma", "gemma2") and hf.endswith("norm.weight"):
            w = w + 1
        if name.endswith("ffn_gate_inp_shexp.weight"):
            w = w.reshape(-1)
        out[name] = w
    if family.output == "required" and "output.weight" not in out:  # tied: llama.cpp needs its own copy
        out["output.weight"] = out["token_embd.weight"]
    return {k: v.numpy() for k, v in out.items()}


def _read(path):
    reader = gguf.GGUFReader(path)
    return reader, {t.name: t for t in reader.tensors}


def _values(t) -> np.ndarray:
    data = np.asarray(t.data)
    return gguf.quants.dequantize(data, t.tensor_type) if t.tensor_type.name.startswith("Q") else data


def test_float_export_holds_the_converter_tensors_and_metadata(family, tokenizer, tmp_path):
    model = build(family)
    summary = export_gguf(model, tmp_path / "m.gguf", tokenizer)
    reader, tensors = _read(tmp_path / "m.gguf")
    arch = gguf.MODEL_ARCH_NAMES[FAMILIES[family].arch]
    assert _field(reader, "general.architecture") == arch == summary["gguf_architecture"]
    want = {"block_count": 2, "embedding_length": 64, "context_length": 128, "attention.head_count": 4,
            "attention.head_count_kv": KV.get(family, 2), "feed_forward_length": FFN.get(family, 128),
            **EXTRA_KEYS.get(family, {})}
    for key, value in want.items():
        assert _field(reader, f"{arch}.{key}") == pytest.approx(value), key
    expected = expected_tensors(family, model)
    assert set(tensors) == set(expected)
    for name, value in expected.items():
        t = tensors[name]
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, name
        np.testing.assert_array_equal(np.asarray(t.data).reshape(value.shape), value, err_msg=name)
        assert tuple(int(n) for n in reversed(t.shape)) == value.shape, name  # GGUF lists dims innermost first
    assert summary["context_limit"] == (64 if family == "mistral" else 128)  # llama.cpp ignores Mistral's window


def test_packed_layers_keep_their_grid_in_every_family(family, tokenizer, tmp_path):
    """rtn 4-bit symmetric -> Q4_0, whose values are slimkit's dequantized weights exactly, after the transforms."""
    model = build(family)
    tied_only = FAMILIES[family].output == "tied"  # Gemma: llama.cpp's output is the (float) embedding
    quantize_model_rtn(model, 4, 32, sym=True, exclude=("lm_head",) if tied_only else ())
    export_gguf(model, tmp_path / "q.gguf", tokenizer, dtype="f16")
    _, tensors = _read(tmp_path / "q.gguf")
    expected = expected_tensors(family, model)
    assert set(tensors) == set(expected)
    packed = {n for n, t in tensors.items() if t.tensor_type == gguf.GGMLQuantizationType.Q4_0}
    vectors = sum(1 for n in tensors if n.endswith("ffn_gate_inp_shexp.weight"))  # packed, written 1-D as F32
    n_packed = sum(isinstance(m, PackedLinear) for m in model.modules())
    n_packed += 3 * sum(isinstance(m, SlimkitPackedExperts) for m in model.modules())  # gate, up, down per layer
    assert len(packed) + vectors == n_packed > 0
    for name in packed:
        np.testing.assert_array_equal(_values(tensors[name]).reshape(expected[name].shape), expected[name], name)
    if vectors:
        np.testing.assert_array_equal(tensors["blk.0.ffn_gate_inp_shexp.weight"].data,
                                      expected["blk.0.ffn_gate_inp_shexp.weight"])


def test_float_experts_as_q8_0(tokenizer, tmp_path):
    """3-D experts quantized like any matrix: llama.cpp's Q8_0 of each expert's rows."""
    model = build("mixtral")
    export_gguf(model, tmp_path / "m.gguf", tokenizer, dtype="q8_0")
    _, tensors = _read(tmp_path / "m.gguf")
    want = expected_tensors("mixtral", model)["blk.1.ffn_gate_exps.weight"]
    t = tensors["blk.1.ffn_gate_exps.weight"]
    assert t.tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert tuple(reversed([int(n) for n in t.shape])) == (4, 128, 64)
    np.testing.assert_array_equal(np.asarray(t.data).reshape(4, 128, -1),
                                  gguf.quants.quantize(want, gguf.GGMLQuantizationType.Q8_0))


def test_a_packed_experts_module_needs_only_an_adapter(tokenizer, tmp_path, monkeypatch):
    model = build("qwen2_moe")
    pack_experts(model)
    monkeypatch.setitem(PACKED, PackedExperts, PackedExperts.adapter)
    export_gguf(model, tmp_path / "e.gguf", tokenizer)
    _, tensors = _read(tmp_path / "e.gguf")
    experts = model.model.layers[1].mlp.experts.packed("gate_up_proj")
    dense = experts.dequantize()  # [E, 2I, H]
    for name, part in (("ffn_gate_exps", dense[:, :64]), ("ffn_up_exps", dense[:, 64:])):
        t = tensors[f"blk.1.{name}.weight"]
        assert t.tensor_type == gguf.GGMLQuantizationType.Q4_0
        np.testing.assert_array_equal(_values(t).reshape(4, 64, 64), part.numpy())


def test_falcon_new_decoder_groups_its_qkv_by_kv_head(tokenizer, tmp_path):
    model = build("falcon", new_decoder_architecture=True, num_kv_heads=2)
    export_gguf(model, tmp_path / "f.gguf", tokenizer)
    reader, tensors = _read(tmp_path / "f.gguf")
    assert _field(reader, "falcon.attention.head_count_kv") == 2 and "blk.0.attn_norm_2.weight" in tensors
    qkv = model.transformer.h[0].self_attention.query_key_value.weight.detach()
    np.testing.assert_array_equal(tensors["blk.0.attn_qkv.weight"].data, _grouped_qkv(qkv, 4, 2, 16).numpy())


@pytest.mark.parametrize(("kind", "settings", "message"), [
    ("gemma2", dict(query_pre_attn_scalar=32), "query_pre_attn_scalar"),
    ("gemma", dict(tie_word_embeddings=False), "untied lm_head"),
    ("qwen2_moe", dict(norm_topk_prob=True), "norm_topk_prob"),
    ("falcon", dict(alibi=True), "alibi"),
    ("stablelm", dict(qk_layernorm=True), "qk_layernorm"),
    ("llama", dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}), "rope type 'linear'"),
    ("olmo", dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}),
     "partial rotary embeddings \\(8 of 16"),
    ("qwen3", dict(attention_bias=True), "attn_output.bias, which llama.cpp's qwen3 does not read"),
    ("gpt_neox", dict(attention_bias=False), "attn_qkv.bias"),
])
def test_what_llama_cpp_cannot_run_is_refused(kind, settings, message, tokenizer, tmp_path):
    with pytest.raises(Exception, match=message) as info:
        export_gguf(build(kind, **settings), tmp_path / "x.gguf", tokenizer)
    assert type(info.value).__name__ == "ModelNotSupportedError"
    assert FAMILIES[kind].hf_class in str(info.value) or "GGUF export:" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_a_family_whose_output_is_the_embedding_refuses_a_quantized_lm_head(tokenizer, tmp_path):
    model = build("gemma")
    quantize_model_rtn(model, 4, 32, exclude=())  # lm_head packed: no longer the embedding llama.cpp reuses
    with pytest.raises(Exception, match="reuses the embedding as its output layer.*lm_head") as info:
        export_gguf(model, tmp_path / "x.gguf", tokenizer)
    assert type(info.value).__name__ == "ModelNotSupportedError" and list(tmp_path.iterdir()) == []


def test_an_unsupported_family_lists_the_supported_ones(tokenizer, tmp_path):
    opt = transformers.OPTForCausalLM(transformers.OPTConfig(vocab_size=256, hidden_size=32, num_hidden_layers=1,
                                                             ffn_dim=64, num_attention_heads=2, word_embed_proj_dim=32))
    with pytest.raises(Exception, match=r"model_type='opt'") as info:
        export_gguf(opt, tmp_path / "x.gguf", tokenizer)
    for kind in KINDS:
        assert f"{FAMILIES[kind].hf_class} ({kind})" in str(info.value)


def test_the_table_names_only_tensors_of_its_gguf_architecture():
    """Every tensor a family lists exists in the gguf package's tensor set for that architecture."""
    for kind, family in FAMILIES.items():
        known = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[family.arch]}
        for name in family.layer + family.optional + family.top:
            base = name.rsplit(".", 1)[0]
            assert base in known or f"blk.{{bid}}.{base}" in known, (kind, name)
