"""GGUF export read back with the gguf package: tensors, block types, metadata and refusals (no llama.cpp needed)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
import transformers

from slimkit.engines.gguf import export_gguf
from slimkit.engines.gguf.tensors import rope_rows as _rope_rows
from slimkit.engines.quantization.lowbit import PackedLinear, quantize_model_hqq, quantize_model_rtn
from slimkit.errors import ConfigError, ModelNotSupportedError
from tests.engines.gguf.conftest import BUILDERS, COMMON, tiny_llama

GGUF_LAYER = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
              "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def _read(path) -> tuple[gguf.GGUFReader, dict]:
    reader = gguf.GGUFReader(path)
    return reader, {t.name: t for t in reader.tensors}


def _field(reader, key):
    return reader.fields[key].contents()


def _gguf_name(hf_name: str) -> str:
    parts = hf_name.split(".")
    return f"blk.{parts[2]}.{GGUF_LAYER[parts[-1]]}.weight"


def _unpermuted(model, arch, hf_name, rows: np.ndarray) -> np.ndarray:
    """GGUF rows back in Hugging Face order (llama's q/k are reordered for llama.cpp's rotary)."""
    if arch != "llama" or hf_name.split(".")[-1] not in ("q_proj", "k_proj"):
        return rows
    heads = model.config.num_attention_heads if hf_name.endswith("q_proj") else model.config.num_key_value_heads
    order = _rope_rows(rows.shape[0], heads).numpy()
    out = np.empty_like(rows)
    out[order] = rows
    return out


def _packed(model):
    return [(n, m) for n, m in model.named_modules() if isinstance(m, PackedLinear)]


def test_float_export_is_the_model_bit_for_bit(arch, tokenizer, tmp_path):
    model = BUILDERS[arch]()
    summary = export_gguf(model, tmp_path / "m.gguf", tokenizer, dtype="f32")
    reader, tensors = _read(tmp_path / "m.gguf")
    assert _field(reader, "general.architecture") == arch and summary["file_type"] == "ALL_F32"
    assert _field(reader, f"{arch}.attention.head_count_kv") == 2
    tied = model.config.tie_word_embeddings
    assert ("output.weight" in tensors) is (not tied)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name != "lm_head":
            got = _unpermuted(model, arch, name, np.asarray(tensors[_gguf_name(name)].data))
            np.testing.assert_array_equal(got, module.weight.detach().numpy())
    np.testing.assert_array_equal(tensors["token_embd.weight"].data, model.model.embed_tokens.weight.detach().numpy())
    if arch == "qwen2":  # biases stay in Hugging Face order: llama.cpp runs Qwen2 with NeoX rotary
        np.testing.assert_array_equal(tensors["blk.1.attn_k.bias"].data,
                                      model.model.layers[1].self_attn.k_proj.bias.detach().numpy())
    assert len(_field(reader, "tokenizer.ggml.tokens")) == 256 and _field(reader, "tokenizer.ggml.merges") == []


def test_f16_export_halves_the_matrices(tokenizer, tmp_path):
    model = tiny_llama()
    summary = export_gguf(model, tmp_path / "m.gguf", tokenizer, dtype="f16")
    _, tensors = _read(tmp_path / "m.gguf")
    assert summary["file_type"] == "MOSTLY_F16"
    assert tensors["blk.0.ffn_up.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["blk.0.ffn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32  # 1-D stays F32
    np.testing.assert_array_equal(tensors["blk.0.ffn_up.weight"].data,
                                  model.model.layers[0].mlp.up_proj.weight.detach().half().numpy())


def test_q8_0_float_matrices_are_llama_cpp_reference_quantization(tokenizer, tmp_path):
    """dtype='q8_0' quantizes the float matrices (here all of them) exactly as gguf.quants / llama.cpp do."""
    model = tiny_llama()
    summary = export_gguf(model, tmp_path / "m.gguf", tokenizer, dtype="q8_0")
    _, tensors = _read(tmp_path / "m.gguf")
    assert summary["file_type"] == "MOSTLY_Q8_0"
    embed = model.model.embed_tokens.weight.detach().numpy()
    t = tensors["token_embd.weight"]
    assert t.tensor_type == gguf.GGMLQuantizationType.Q8_0
    np.testing.assert_array_equal(t.data, gguf.quants.quantize(embed, gguf.GGMLQuantizationType.Q8_0))
    assert np.abs(gguf.quants.dequantize(t.data, t.tensor_type) - embed).max() <= np.abs(embed).max() / 127


@pytest.mark.parametrize(("bits", "group_size", "sym", "qtype"), [
    (4, 32, True, "Q4_0"), (8, 32, True, "Q8_0"), (4, 32, False, "Q4_1"), (4, 64, False, "Q4_1")])
def test_packed_weights_keep_their_grid(arch, tokenizer, tmp_path, bits, group_size, sym, qtype):
    """Q4_0 / Q8_0 dequantize to slimkit's weights exactly; Q4_1 within fp16 rounding of its min ``-z * s``."""
    model = BUILDERS[arch]()
    quantize_model_rtn(model, bits, group_size, sym)
    summary = export_gguf(model, tmp_path / "q.gguf", tokenizer)
    assert summary["file_type"] == f"MOSTLY_{qtype}"
    _, tensors = _read(tmp_path / "q.gguf")
    for name, layer in _packed(model):
        t = tensors[_gguf_name(name)]
        assert t.tensor_type.name == qtype
        got = _unpermuted(model, arch, name, gguf.quants.dequantize(t.data, t.tensor_type))
        want = layer.dequantize(torch.float32).numpy()
        if qtype == "Q4_1":
            zs = (layer.zeros.float() * layer.scales.float()).abs().repeat_interleave(group_size, 1).numpy()
            assert np.all(np.abs(got - want) <= zs * 2.0**-11 + 2.0**-25)
            assert np.abs(got - want).max() > 0  # the fp16 min really is a rounding, not a copy of slimkit's math
        else:
            np.testing.assert_array_equal(got, want)


def test_hqq_fractional_zeros_go_to_q4_1(tokenizer, tmp_path):
    model = tiny_llama()
    quantize_model_hqq(model, 4, 32, iters=3)
    export_gguf(model, tmp_path / "h.gguf", tokenizer)
    _, tensors = _read(tmp_path / "h.gguf")
    layer = model.model.layers[0].mlp.down_proj
    t = tensors["blk.0.ffn_down.weight"]
    step = layer.scales.float().repeat_interleave(32, 1).numpy()
    err = np.abs(gguf.quants.dequantize(t.data, t.tensor_type) - layer.dequantize(torch.float32).numpy())
    assert t.tensor_type == gguf.GGMLQuantizationType.Q4_1 and np.all(err <= 0.0074 * step + 2.0**-25)


@pytest.mark.parametrize(("bits", "group_size", "sym", "message"), [
    (4, 16, False, "group_size=16"), (3, 32, False, "3-bit"), (8, 32, False, "8-bit asymmetric")])
def test_layouts_without_a_gguf_twin_are_refused(tokenizer, tmp_path, bits, group_size, sym, message):
    model = tiny_llama()
    quantize_model_rtn(model, bits, group_size, sym)
    with pytest.raises(ConfigError, match=message) as info:
        export_gguf(model, tmp_path / "x.gguf", tokenizer)
    assert "group_size=32" in str(info.value) and "sym=True" in str(info.value)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_a_layer_gguf_cannot_store_is_named(tokenizer, tmp_path):
    model = tiny_llama()
    model.model.layers[1].mlp.up_proj = torch.ao.nn.quantized.dynamic.Linear(64, 128)
    with pytest.raises(ModelNotSupportedError, match="blk.1.ffn_up.weight"):
        export_gguf(model, tmp_path / "x.gguf", tokenizer)
    assert list(tmp_path.iterdir()) == []


def test_bad_settings_are_refused(tokenizer, tmp_path):
    with pytest.raises(ConfigError, match="dtype='bf16'.*f32, f16, q8_0"):
        export_gguf(tiny_llama(), tmp_path / "x.gguf", tokenizer, dtype="bf16")
    with pytest.raises(ConfigError, match="tokenizer"):
        export_gguf(tiny_llama(), tmp_path / "x.gguf", None)
    scaled = transformers.LlamaConfig(**COMMON, rope_scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ModelNotSupportedError, match="rope type 'linear'"):
        export_gguf(transformers.LlamaForCausalLM(scaled), tmp_path / "x.gguf", tokenizer)
