"""GGUF files run by llama.cpp: logits against transformers / slimkit's dequantized weights, generation, errors."""

from __future__ import annotations

import pytest
import torch

from slimkit.engines.gguf import FAMILIES, PACKED, export_gguf
from slimkit.engines.gguf.runtime import LlamaCppModule
from slimkit.engines.quantization.lowbit import PackedLinear, quantize_model_rtn
from slimkit.errors import SaveLoadError
from tests.engines.gguf.conftest import BUILDERS, PackedExperts, build
from tests.engines.gguf.conftest import FAMILIES as KINDS

pytestmark = pytest.mark.llamacpp
IDS = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits.float()


def test_fp32_export_matches_transformers(arch, tokenizer, tmp_path):
    """Tolerance 0.02 on logits of std ~0.8: llama.cpp keeps its KV cache in fp16."""
    model = BUILDERS[arch]()
    export_gguf(model, tmp_path / "m.gguf", tokenizer)
    runner = LlamaCppModule(tmp_path / "m.gguf", n_threads=1, n_ctx=64)
    want = _logits(model)
    assert (runner(IDS).logits - want).abs().max() < 0.02
    greedy = model.generate(IDS[:1, :5], max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(runner.generate(IDS[:1, :5], max_new_tokens=6), greedy)


@pytest.mark.parametrize(("bits", "sym"), [(4, False), (4, True), (8, True)])
def test_block_exports_run_slimkit_weights(arch, tokenizer, tmp_path, bits, sym):
    """Q4_1 / Q4_0 / Q8_0 files give slimkit's own quantized logits (llama.cpp rounds activations to 8 bits)."""
    model = BUILDERS[arch]()
    float_logits = _logits(model)
    quantize_model_rtn(model, bits, 32, sym)
    for layer in model.modules():
        if isinstance(layer, PackedLinear):
            layer.use_kernel = False  # the plain dequantized matmul
    want = _logits(model)
    export_gguf(model, tmp_path / "q.gguf", tokenizer)
    got = LlamaCppModule(tmp_path / "q.gguf", n_threads=1, n_ctx=64)(IDS).logits
    assert (got - want).abs().max() < 0.15
    if bits == 4:  # the file holds slimkit's grid: much closer to slimkit than slimkit is to the float model
        assert (got - want).abs().max() < 0.25 * (want - float_logits).abs().max()


#: every family's tiny model, plus Falcon's new decoder (grouped-query qkv, two norms per layer), Llama with every
#: bias (q/k biases reordered like their rows), and Gemma 2's sliding window run by llama.cpp (both layer patterns)
CASES = [(kind, {}) for kind in KINDS] + [
    ("falcon", dict(new_decoder_architecture=True, num_kv_heads=2)),
    ("llama", dict(attention_bias=True, mlp_bias=True)),
    ("gemma2", dict(sliding_window=4)),
    ("gemma2", dict(sliding_window=4, layer_types=["full_attention", "sliding_attention"]))]
_IDS = [kind + "".join(f"-{k}" for k in settings) for kind, settings in CASES]


@pytest.mark.parametrize(("kind", "settings"), CASES, ids=[f"{i}-{n}" for i, n in enumerate(_IDS)])
def test_every_family_gives_transformers_logits(kind, settings, tokenizer, tmp_path):
    """fp32 files: llama.cpp's logits within 0.01 of transformers' (measured at most 0.006, Gemma's logits being
    twice as large; llama.cpp keeps its KV cache in fp16 and approximates GELU with tanh)."""
    model = build(kind, **settings)
    export_gguf(model, tmp_path / "m.gguf", tokenizer)
    got = LlamaCppModule(tmp_path / "m.gguf", n_threads=1, n_ctx=64)(IDS).logits
    assert (got - _logits(model)).abs().max() < 0.01


def test_a_window_llama_cpp_does_not_run_limits_the_context(tokenizer, tmp_path):
    """llama.cpp's llama graph attends over the whole context: a Mistral file is exact up to its window only."""
    model = build("mistral", sliding_window=4)
    summary = export_gguf(model, tmp_path / "m.gguf", tokenizer)
    gap = (LlamaCppModule(tmp_path / "m.gguf", n_threads=1, n_ctx=64)(IDS).logits - _logits(model)).abs()
    assert summary["context_limit"] == 4
    assert gap[:, :4].max() < 0.01 and gap[:, 4:].max() > 0.1  # the limit is real, not a formality


def test_every_family_runs_its_packed_weights(family, tokenizer, tmp_path):
    """Q4_1 files of every family give slimkit's own quantized logits: the gap to slimkit is under a fifth of
    slimkit's gap to the float model (measured under a tenth). MoE routing uses every expert here, so that
    llama.cpp's 8-bit activations cannot flip a near-tie in the top-k choice."""
    model = build(family, **({"num_experts_per_tok": 4} if family in ("mixtral", "qwen2_moe") else {}))
    float_logits = _logits(model)
    quantize_model_rtn(model, 4, 32, sym=False, exclude=("lm_head",) if FAMILIES[family].output == "tied" else ())
    for layer in model.modules():
        if isinstance(layer, PackedLinear):
            layer.use_kernel = False
    want = _logits(model)
    summary = export_gguf(model, tmp_path / "q.gguf", tokenizer)
    assert summary["file_type"] == "MOSTLY_Q4_1"
    got = LlamaCppModule(tmp_path / "q.gguf", n_threads=1, n_ctx=64)(IDS).logits
    assert (got - want).abs().max() < 0.2 * (want - float_logits).abs().max()


@pytest.mark.parametrize("kind", ["mixtral", "qwen2_moe"])
def test_packed_experts_run_in_llama_cpp(kind, tokenizer, tmp_path, monkeypatch):
    """3-D Q4_0 experts (through a packed-experts adapter) give the logits of the model whose experts hold the
    same dequantized grid: llama.cpp's gap is under a fifth of the quantization's own effect."""
    model = build(kind, num_experts_per_tok=4)
    float_logits = _logits(model)
    stand_ins = [PackedExperts(layer.mlp.experts) for layer in model.model.layers]
    with torch.no_grad():
        for layer, packed in zip(model.model.layers, stand_ins, strict=True):
            for param in PackedExperts.PARAMS:
                getattr(layer.mlp.experts, param).copy_(packed.packed(param).dequantize())
    want = _logits(model)
    for layer, packed in zip(model.model.layers, stand_ins, strict=True):
        layer.mlp.experts = packed
    monkeypatch.setitem(PACKED, PackedExperts, PackedExperts.adapter)
    summary = export_gguf(model, tmp_path / "e.gguf", tokenizer)
    assert summary["tensor_types"]["blk.0.ffn_gate_exps.weight"] == "Q4_0"
    got = LlamaCppModule(tmp_path / "e.gguf", n_threads=1, n_ctx=64)(IDS).logits
    assert (got - want).abs().max() < 0.2 * (want - float_logits).abs().max()


def test_padding_mask_keeps_rows_independent(tokenizer, tmp_path):
    model = BUILDERS["llama"]()
    export_gguf(model, tmp_path / "m.gguf", tokenizer)
    runner = LlamaCppModule(tmp_path / "m.gguf", n_threads=1, n_ctx=64)
    mask = torch.ones_like(IDS)
    mask[1, :4] = 0  # left padding
    out = runner(IDS, attention_mask=mask).logits
    alone = runner(IDS[1:, 4:]).logits
    assert torch.equal(out[1, 4:], alone[0]) and torch.equal(out[1, :4], torch.zeros(4, 256))


def test_real_tokenizer_round_trips_through_the_file(tmp_path):
    """SmolLM2's BPE (49152 tokens, merges, specials, pre-tokenizer 'smollm') tokenizes like transformers."""
    import transformers

    from slimkit.zoo import load

    tokenizer = load("smollm2-135m").tokenizer
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                      max_position_embeddings=64, tie_word_embeddings=True)
    export_gguf(transformers.LlamaForCausalLM(config), tmp_path / "s.gguf", tokenizer, dtype="f16")
    runner = LlamaCppModule(tmp_path / "s.gguf", n_threads=1, n_ctx=64)
    text = "Python's help() says: a = [x**2 for x in range(10)]  # 3.14\n\tDone!"
    ids = runner.llm.tokenize(text.encode(), add_bos=False)
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert runner.llm.detokenize(ids).decode() == text
    assert runner.eos_token_id == tokenizer.eos_token_id


def test_a_broken_file_names_the_path_and_llama_cpp_message(tokenizer, tmp_path):
    export_gguf(BUILDERS["llama"](), tmp_path / "m.gguf", tokenizer)
    data = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) // 2])
    with pytest.raises(SaveLoadError, match=r"cut\.gguf.*(error|failed)") as info:
        LlamaCppModule(tmp_path / "cut.gguf", n_threads=1, n_ctx=64)
    assert "not within the file bounds" in str(info.value)
