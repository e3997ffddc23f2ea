from __future__ import annotations

import copy

import pytest
import torch
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

from slimkit.engines.speedup import channel_dependency_report
from tests.engines.speedup.speedup_models import (
    flop_counter_macs,
    l1_rows,
    layer_macs,
    ones_masks,
    param_count,
    predicted_macs,
    predicted_params,
    replay_matches,
    row_mask,
    run_speedup,
    zeroed_reference,
)

BERT = dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2, vocab_size=100)
LLAMA = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, num_hidden_layers=2,
             vocab_size=256)
LINEAR_OPS = ("addmm", "mm")


def bert() -> BertModel:
    torch.manual_seed(0)
    return BertModel(BertConfig(**BERT)).eval()


def llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**LLAMA)).eval()


@pytest.fixture
def bert_inputs():
    ids = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # one padded sequence
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture
def llama_inputs():
    return {"input_ids": torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(1))}


def weakest(scores: torch.Tensor, n: int) -> list[int]:
    return sorted(scores.argsort()[:n].tolist())


def check_transformer(factory, model, inputs, masks, tmp_path, removed_params, output):
    before = copy.deepcopy(model)
    base_params, base_macs = param_count(model), layer_macs(model, inputs)
    assert sum(base_macs.values()) == flop_counter_macs(model, inputs, LINEAR_OPS)
    small, speedup = run_speedup(model, inputs, masks)
    kept = speedup.kept_channels
    with torch.no_grad():
        out = getattr(small(**inputs), output)
        ref = getattr(zeroed_reference(before, masks, kept)(**inputs), output)
        base = getattr(before(**inputs), output)
    assert out.shape == base.shape and not torch.allclose(out, base)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert param_count(small) == base_params - removed_params == predicted_params(before, kept)
    assert flop_counter_macs(small, inputs, LINEAR_OPS) == predicted_macs(base_macs, before, kept)
    replay_matches(factory, small, kept, inputs, tmp_path)
    return kept


def test_bert_ffn_channels_and_heads(tmp_path, bert_inputs):
    model = bert()
    masks, drop_heads = {}, {0: 2, 1: 1}
    for i, layer in enumerate(model.encoder.layer):
        ffn = layer.intermediate.dense
        masks[f"encoder.layer.{i}.intermediate.dense"] = row_mask(ffn, l1_rows(ffn.weight, 64))
        att = layer.attention.self
        score = sum(getattr(att, p).weight.abs().reshape(4, -1).sum(1) for p in ("query", "key", "value"))
        heads = [h for h in range(4) if h not in weakest(score, drop_heads[i])]
        rows = [h * 16 + d for h in heads for d in range(16)]
        for p in ("query", "key", "value"):
            masks[f"encoder.layer.{i}.attention.self.{p}"] = row_mask(getattr(att, p), rows)
    # per removed head: q/k/v rows + biases (3 * (16*64 + 16)) and 16 input columns of attention.output.dense
    # per removed FFN channel: a row + bias of intermediate.dense and a column of output.dense (64 + 1 + 64)
    removed = 3 * (3 * (16 * 64 + 16) + 16 * 64) + 2 * 64 * (64 + 1 + 64)
    kept = check_transformer(bert, model, bert_inputs, masks, tmp_path, removed, "last_hidden_state")
    att0, att1 = model.encoder.layer[0].attention.self, model.encoder.layer[1].attention.self
    assert (att0.num_attention_heads, att0.all_head_size) == (2, 32)
    assert (att1.num_attention_heads, att1.all_head_size) == (3, 48)
    assert len(kept["encoder.layer.0.attention.self"]["heads"]) == 2
    assert model.encoder.layer[0].attention.output.dense.in_features == 32
    assert model.encoder.layer[1].output.dense.in_features == 64
    assert model.config.num_attention_heads == 4  # the shared config still describes the base model


def test_bert_sparsity_zero_is_bit_identical(bert_inputs):
    model = bert()
    with torch.no_grad():
        base = model(**bert_inputs).last_hidden_state
    _, speedup = run_speedup(model, bert_inputs, ones_masks(model))
    assert speedup.kept_channels == {}
    with torch.no_grad():
        assert torch.equal(model(**bert_inputs).last_hidden_state, base)


def test_llama_mlp_channels_and_kv_head_groups(tmp_path, llama_inputs):
    model = llama()
    masks = {}
    for i, layer in enumerate(model.model.layers):
        mlp = layer.mlp
        score = mlp.gate_proj.weight.abs().sum(1) + mlp.up_proj.weight.abs().sum(1)
        rows = sorted(score.argsort(descending=True)[:64].tolist())
        for p in ("gate_proj", "up_proj"):
            masks[f"model.layers.{i}.mlp.{p}"] = row_mask(getattr(mlp, p), rows)
    att = model.model.layers[0].self_attn  # layer 0 loses its weaker kv group (2 query heads + 1 kv head)
    score = (att.q_proj.weight.abs().reshape(2, -1).sum(1) + att.k_proj.weight.abs().reshape(2, -1).sum(1)
             + att.v_proj.weight.abs().reshape(2, -1).sum(1))
    gone = int(score.argmin())
    keep_g = 1 - gone
    masks["model.layers.0.self_attn.q_proj"] = row_mask(att.q_proj, list(range(keep_g * 32, keep_g * 32 + 32)))
    for p in ("k_proj", "v_proj"):
        masks[f"model.layers.0.self_attn.{p}"] = row_mask(getattr(att, p), list(range(keep_g * 16, keep_g * 16 + 16)))
    # kv group: 32 q rows, 16 k rows, 16 v rows, 32 o_proj columns (x 64); MLP: 64 gate/up rows + down cols x 2 layers
    removed = (32 + 16 + 16 + 32) * 64 + 2 * 64 * 3 * 64
    kept = check_transformer(llama, model, llama_inputs, masks, tmp_path, removed, "logits")
    assert kept["model.layers.0.self_attn"] == {"heads": [2 * keep_g, 2 * keep_g + 1], "kv_heads": [keep_g]}
    assert kept["model.layers.0.self_attn.o_proj"]["in"] == list(range(keep_g * 32, keep_g * 32 + 32))
    assert "model.layers.1.self_attn.q_proj" not in kept
    assert (att.q_proj.out_features, att.k_proj.out_features, att.o_proj.in_features) == (32, 16, 32)
    assert att.num_key_value_groups == 2 and model.config.num_key_value_heads == 2
    generated = model.generate(**llama_inputs, max_new_tokens=3, do_sample=False)  # kv cache with fewer heads
    assert generated.shape == (2, 10)


def test_llama_sparsity_zero_is_bit_identical(llama_inputs):
    model = llama()
    with torch.no_grad():
        base = model(**llama_inputs).logits
    _, speedup = run_speedup(model, llama_inputs, ones_masks(model))
    assert speedup.kept_channels == {}
    with torch.no_grad():
        assert torch.equal(model(**llama_inputs).logits, base)


def test_partial_head_masks_keep_the_head_and_say_why(llama_inputs):
    model = llama()
    q = model.model.layers[0].self_attn.q_proj
    with pytest.warns(UserWarning, match=r"q_proj: mask removes 8 of 64 output channels; 0 removed \(attention heads "
                                         r"go only as whole kv-head groups"):
        _, speedup = run_speedup(model, llama_inputs, {"model.layers.0.self_attn.q_proj": row_mask(q, list(range(56)))})
    assert speedup.kept_channels == {} and q.out_features == 64


def test_llama_report_lists_mlp_and_head_groups(llama_inputs):
    report = channel_dependency_report(llama(), llama_inputs)
    assert ["model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"] in report
    heads = report.infos[report.index([f"model.layers.1.self_attn.{p}_proj" for p in "qkvo"])]
    assert heads.kind == "heads" and heads.channels == 2 and heads.constraints == ["4 heads in 2 kv groups of 2"]
    stream = next(i for i in report.infos if "model.embed_tokens" in i.members)
    assert len(stream.followers) == 5 and "lm_head" in stream.consumers
