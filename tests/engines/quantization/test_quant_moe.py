"""MoE experts through smash: every weight quantizer covers the experts of tiny Mixtral and Qwen2-MoE models,
stays close to the float model, and reloads exactly; gptq lists the experts it had to round to nearest."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers

from slimkit import SmashConfig, SmashedModel, smash
from slimkit.engines.quantization.int8.experts import Int8Experts
from slimkit.engines.quantization.lowbit import quantize_model_awq, quantize_model_gptq
from slimkit.engines.quantization.lowbit.experts import PackedExperts
from tests.algorithms.testers.lowbit import ByteTokenizer
from tests.engines.quantization.tiny_moe import experts_of, tiny_moe

SETTINGS = {
    "int8_dynamic": ({}, Int8Experts),
    "rtn": ({"group_size": 32}, PackedExperts),
    "hqq": ({"group_size": 32, "iters": 5}, PackedExperts),
    "gptq": ({"group_size": 32, "n_calibration_samples": 4, "seq_len": 32}, PackedExperts),
    "awq": ({"group_size": 32, "n_calibration_samples": 4, "seq_len": 32, "n_grid": 4}, PackedExperts),
}


def _smash(model, algorithm: str, **hps):
    cfg = SmashConfig(device="cpu")
    cfg["quantizer"] = algorithm
    for key, value in {**SETTINGS[algorithm][0], **hps}.items():
        cfg[f"{algorithm}_{key}"] = value
    if algorithm in ("gptq", "awq"):
        cfg.add_tokenizer(ByteTokenizer())
        cfg.add_data("PyDocText")
    return smash(model, cfg)


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe"])
@pytest.mark.parametrize("algorithm", list(SETTINGS))
def test_experts_are_quantized_covered_close_and_reload_exactly(family, algorithm, tmp_path):
    base = tiny_moe(family)
    experts = list(experts_of(base))
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        reference = base(ids).logits
    smashed = _smash(copy.deepcopy(base), algorithm)
    assert all(isinstance(smashed.model.get_submodule(n), SETTINGS[algorithm][1]) for n in experts)
    record = smashed.applied[0]["state"]["coverage"]
    assert all(n not in {x["name"] for x in record["left"]} for n in experts)
    assert record["share_not_excluded"] >= 0.99, record["left"]
    assert record["quantized_params"] > 0.45 * record["linear_like_params"]  # the experts are most of the weights
    assert record["by_kind"]["experts"]["quantized_params"] == record["by_kind"]["experts"]["params"] > 0
    with torch.no_grad():
        out = smashed(ids).logits
    assert torch.nn.functional.cosine_similarity(out.flatten(), reference.flatten(), dim=0) > 0.9
    smashed.save_pretrained(tmp_path)
    reloaded = SmashedModel.from_pretrained(tmp_path)
    assert all(isinstance(reloaded.model.get_submodule(n), SETTINGS[algorithm][1]) for n in experts)
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, out)


@pytest.mark.parametrize("quantize", [quantize_model_gptq, quantize_model_awq])
def test_experts_without_calibration_tokens_fall_back_to_rtn_and_are_listed(quantize):
    model = tiny_moe("mixtral")
    # one repeated token: every position has the same hidden state, so each layer routes all of them to the same
    # two experts and the other two receive nothing
    ids = torch.full((2, 24), 7)
    with pytest.warns(RuntimeWarning, match="too few calibration tokens") as caught:
        specs = quantize(model, ids, bits=4, group_size=32)
    for name in experts_of(tiny_moe("mixtral")):
        fallback = specs[name]["rtn_fallback"]
        assert len(fallback) == 2 and model.get_submodule(name).rtn_fallback == fallback
        assert f"{name}: experts {fallback} (fewer than 16 tokens)" in str(caught[0].message)


def test_smash_records_the_rtn_fallback_experts():
    with pytest.warns(RuntimeWarning, match="too few calibration tokens"):  # 4 routed tokens an expert
        smashed = _smash(tiny_moe("mixtral"), "gptq", n_calibration_samples=1, seq_len=8)
    state = smashed.applied[0]["state"]
    assert state["rtn_fallback"] == {n: [0, 1, 2, 3] for n in experts_of(tiny_moe("mixtral"))}
    assert state["coverage"]["share_not_excluded"] >= 0.99  # still quantized, only not calibrated


@pytest.mark.parametrize("algorithm", ["int8_dynamic", "rtn"])
def test_an_experts_family_it_cannot_represent_is_left_with_the_reason(algorithm):
    config = transformers.GptOssConfig(vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                       num_local_experts=4, num_experts_per_tok=2)
    torch.manual_seed(0)
    smashed = _smash(transformers.GptOssForCausalLM(config).eval(), algorithm)
    left = {x["name"]: x["reason"] for x in smashed.coverage[algorithm]["left"]}
    assert left["model.layers.0.mlp.experts"].startswith("unsupported: GptOssExperts has expert biases")
    assert type(smashed.model.get_submodule("model.layers.0.mlp.experts")).__name__ == "GptOssExperts"
    assert smashed.coverage[algorithm]["by_kind"]["linear"]["quantized_params"] > 0  # the rest is quantized
