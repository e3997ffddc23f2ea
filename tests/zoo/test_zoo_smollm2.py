from __future__ import annotations

import time

import pytest
import torch

from slimkit import zoo
from slimkit.zoo.smollm2 import english_text

pytestmark = pytest.mark.slow  # the first load dequantises the GGUF (~20 s)


@pytest.fixture
def smollm(shared_cache):
    return zoo.load("smollm2-135m")


def test_smollm2_loads_with_real_text_inputs(smollm):
    ids = smollm.example_inputs["input_ids"]
    assert ids.shape == (1, 64) and ids.dtype == torch.long
    assert english_text().startswith(smollm.tokenizer.decode(ids[0]))
    model = smollm.model
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied embeddings survive
    assert model.config.num_attention_heads == 9 and model.config.num_key_value_heads == 3
    assert getattr(model.config, "quantization_config", None) is None
    assert next(model.parameters()).dtype == torch.float32
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    with torch.no_grad():
        ppl = float(model(ids, labels=ids).loss.exp())
    assert ppl < 100  # a random 135M model would be ~49k


def test_smollm2_second_load_reads_cache(smollm, shared_cache):
    start = time.perf_counter()
    again = zoo.load("smollm2-135m", batch_size=2, seq_len=32)
    assert time.perf_counter() - start < 5.0
    assert again.meta["cache_hit"] is True
    assert again.example_inputs["input_ids"].shape == (2, 32)
    assert torch.equal(again.model.model.layers[3].mlp.up_proj.weight, smollm.model.model.layers[3].mlp.up_proj.weight)
    names = {p.name for p in (shared_cache / "zoo" / "smollm2-135m-v1").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names


def test_smollm2_build_matches_load(smollm, monkeypatch, tmp_path):
    expected = {k: v.shape for k, v in smollm.model.state_dict().items()}
    assert {k: v.shape for k, v in zoo.build("smollm2-135m").state_dict().items()} == expected
    monkeypatch.setenv("SLIMKIT_CACHE", str(tmp_path / "empty"))  # no cache: config derived from the GGUF
    assert {k: v.shape for k, v in zoo.build("smollm2-135m").state_dict().items()} == expected
