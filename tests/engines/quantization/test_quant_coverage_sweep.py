"""Coverage sweep: int8_dynamic, rtn and gptq on tiny random configs of 16 causal-LM families from transformers.

For each family and quantizer: every matrix weight of the model (except embeddings and MoE routers, kept by
design) is a target of :mod:`slimkit.core.weights`; the quantizer quantizes >= 99 % of the Linear-like parameters
it was not told to exclude (``lm_head`` is excluded by default for rtn/gptq); every target still in the smashed
model is listed in its coverage with a reason; outputs stay close (cosine > 0.9 on random weights); save -> reload
is exact and the coverage is in the saved ``smash_config.json``. A transformers release that changes a layout
(a new Linear subclass, experts moved into another container) turns this red.

MoE families (Mixtral, Qwen2-MoE) hold their experts as 3-D parameters: the quantizers replace each experts module
by a quantized one (every expert on its own), so >= 99 % of the expert parameters are quantized too.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from torch import nn

from slimkit import SmashConfig, SmashedModel, smash
from slimkit.core.weights import DENSE, EXPERTS, find_targets
from tests.algorithms.testers.lowbit import ByteTokenizer

FULL = 0.99
#: share of the MoE expert parameters each quantizer must quantize
EXPERTS_MIN_SHARE = FULL
VOCAB = 256

_ATTN = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": VOCAB,
         "max_position_embeddings": 64}
_DECODER = {**_ATTN, "intermediate_size": 128, "num_key_value_heads": 2}

#: family -> (config class name, model class name, config kwargs): hidden 64, 2 layers, vocabulary 256
FAMILIES: dict[str, tuple[str, str, dict]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", _DECODER),
    "mistral": ("MistralConfig", "MistralForCausalLM", _DECODER),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", _DECODER),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {**_DECODER, "head_dim": 16}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {**_DECODER, "head_dim": 16}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {**_DECODER, "head_dim": 16}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {**_DECODER, "pad_token_id": 0}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64,
                                               "vocab_size": VOCAB}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {**_ATTN, "intermediate_size": 128}),
    "opt": ("OPTConfig", "OPTForCausalLM", {**_ATTN, "ffn_dim": 128, "word_embed_proj_dim": 64}),
    "falcon": ("FalconConfig", "FalconForCausalLM", _ATTN),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", _DECODER),
    "olmo": ("OlmoConfig", "OlmoForCausalLM", _DECODER),
    "granite": ("GraniteConfig", "GraniteForCausalLM", _DECODER),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {**_DECODER, "num_local_experts": 4,
                                                        "num_experts_per_tok": 2}),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", {**_DECODER, "num_experts": 4, "num_experts_per_tok": 2,
                                                            "moe_intermediate_size": 64,
                                                            "shared_expert_intermediate_size": 64}),
}
MOE = {"mixtral", "qwen2_moe"}

#: quantizer -> (hyperparameters, default exclude patterns)
QUANTIZERS: dict[str, dict] = {
    "int8_dynamic": {},
    "rtn": {"bits": 4, "group_size": 32},
    "gptq": {"bits": 4, "group_size": 32, "n_calibration_samples": 2, "seq_len": 16},
}


def build(family: str) -> nn.Module:
    config_name, model_name, kwargs = FAMILIES[family]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(transformers, model_name)(getattr(transformers, config_name)(**kwargs))
    return model.eval()


def _routers(model: nn.Module) -> set[int]:
    """Parameters of MoE routers (modules named ``*Router``): kept in full precision by design, not targets."""
    return {id(p) for m in model.modules() if type(m).__name__.endswith("Router") for p in m.parameters()}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_matrix_weight_is_a_target(family: str) -> None:
    """No weight matrix hides outside the target definition (embeddings and routers aside)."""
    model = build(family)
    targets = find_targets(model)
    covered = {id(getattr(model.get_submodule(t.name), p)) for t in targets for p in t.params}
    skip = _routers(model) | {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    stray = [n for n, p in model.named_parameters() if p.dim() >= 2 and id(p) not in covered | skip]
    assert not stray, f"{family}: matrix weights outside every target: {stray}"
    assert not [t for t in targets if t.unsupported], f"{family}: {[t for t in targets if t.unsupported]}"
    experts = sum(p.numel() for p in model.parameters() if p.dim() == 3)
    assert sum(t.numel for t in targets if t.kind == EXPERTS) == experts
    assert (experts > 0) == (family in MOE)


def _config(quantizer: str) -> SmashConfig:
    cfg = SmashConfig([quantizer])
    for key, value in QUANTIZERS[quantizer].items():
        cfg[f"{quantizer}_{key}"] = value
    if quantizer == "gptq":
        cfg.add_tokenizer(ByteTokenizer())  # byte ids 0..255: the tiny vocabulary
        cfg.add_data("PyDocText")
    return cfg


@pytest.mark.parametrize("quantizer", sorted(QUANTIZERS))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_quantizer_covers_family(family: str, quantizer: str, tmp_path: Path) -> None:
    model = build(family)
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model(input_ids=ids).logits
    targets = find_targets(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gptq's RTN note for lm_head-free models, transformers' config notes
        smashed = smash(model, _config(quantizer), verbose=False)
    record = smashed.coverage[quantizer]

    # what it left is exactly what is still a full-precision target in the smashed model, each with a reason
    remaining = {t.name for t in find_targets(smashed.model)}
    assert remaining == {x["name"] for x in record["left"]}
    assert all(x["reason"] for x in record["left"])
    assert record["linear_like_params"] == sum(t.numel for t in targets)
    kinds = record["by_kind"]
    dense = [k for k in DENSE if k in kinds]
    dense_params = sum(kinds[k]["params"] for k in dense)
    dense_done = sum(kinds[k]["quantized_params"] for k in dense)
    assert dense_done >= FULL * (dense_params - record["excluded_params"]), record
    if family in MOE:
        experts = kinds[EXPERTS]
        assert experts["quantized_params"] >= EXPERTS_MIN_SHARE * experts["params"], record
        expert_names = {t.name for t in targets if t.kind == EXPERTS}
        listed = {x["name"] for x in record["left"]}
        assert all(n in listed or n not in remaining for n in expert_names)
    assert record["share_not_excluded"] >= FULL, record

    with torch.no_grad():
        out = smashed(input_ids=ids).logits
    cosine = torch.nn.functional.cosine_similarity(out.flatten().float(), reference.flatten().float(), dim=0)
    assert float(cosine) > 0.9

    smashed.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "smash_config.json").read_text())
    assert saved["applied"][0]["state"]["coverage"] == record
    reloaded = SmashedModel.from_pretrained(tmp_path / "saved")
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=ids).logits, out)
    assert reloaded.coverage == smashed.coverage
