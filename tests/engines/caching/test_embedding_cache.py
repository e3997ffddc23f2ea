"""Embedding cache: exact outputs, per-row reuse, a bounded LRU, honest statistics, reload and copies."""

from __future__ import annotations

import copy

import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.engines.caching import EmbeddingLRU, attach_embedding_cache
from slimkit.errors import ModelNotSupportedError


@pytest.fixture(scope="module")
def bert():
    loaded = zoo.load("tiny_bert")
    return loaded.model.eval(), loaded.example_inputs


def _rows(inputs, index):
    return {k: v[index] for k, v in inputs.items()}


def test_mixed_batches_reuse_rows_and_match_uncached(bert):
    base, x = bert
    model = attach_embedding_cache(copy.deepcopy(base), max_entries=16)
    with torch.no_grad():
        model(**_rows(x, [0]))
        assert model.embedding_cache.stats()["misses"] == 1
        mixed = {k: torch.cat([v[[1]], v[[0]], v[[1]]]) for k, v in x.items()}  # one stored row, one repeated
        out = model(**mixed).logits
        torch.testing.assert_close(out, base(**mixed).logits, atol=1e-6, rtol=0)
    stats = model.embedding_cache.stats()
    assert stats["hits"] == 1 and stats["misses"] == 3 and stats["entries"] == 2
    assert torch.equal(out[0], out[2])  # the repeated row ran once
    assert model.embedding_cache.hit_rate == pytest.approx(0.25)


def test_lru_bound_evicts_least_recently_used(bert):
    base, _ = bert
    model = attach_embedding_cache(copy.deepcopy(base), max_entries=3)
    ids = torch.arange(5).unsqueeze(1).repeat(1, 6) + 3
    with torch.no_grad():
        for i in range(3):
            model(input_ids=ids[[i]])
        model(input_ids=ids[[0]])  # touch 0: now 1 is the oldest
        model(input_ids=ids[[3]])  # evicts 1
        cache = model.embedding_cache
        assert len(cache) == 3 and cache.evictions == 1
        hits = cache.hits
        model(input_ids=ids[[0]])
        assert cache.hits == hits + 1
        model(input_ids=ids[[1]])
        assert cache.hits == hits + 1 and cache.misses == 5


def test_training_labels_and_float_inputs_bypass(bert):
    base, x = bert
    model = attach_embedding_cache(copy.deepcopy(base), max_entries=8)
    model.train()
    model(**x)
    model.eval()
    with torch.no_grad():
        model(**x, labels=torch.zeros(x["input_ids"].shape[0], dtype=torch.long))
    stats = model.embedding_cache.stats()
    assert stats["bypassed"] == 2 and stats["entries"] == 0
    with torch.no_grad():
        model(input_ids=x["input_ids"], inputs_embeds=None, attention_mask=x["attention_mask"].float())
    assert model.embedding_cache.stats()["bypassed"] == 3
    cache = EmbeddingLRU(4)
    assert cache.hit_rate == 0.0 and copy.deepcopy(cache).max_entries == 4
    with pytest.raises(ValueError, match="max_entries must be at least 1"):
        EmbeddingLRU(0)


def test_copy_of_a_cached_model_has_its_own_empty_cache(bert):
    base, x = bert
    model = attach_embedding_cache(copy.deepcopy(base), max_entries=8)
    with torch.no_grad():
        model(**x)
        twin = copy.deepcopy(model)
        assert twin.forward.module is twin and twin.embedding_cache is not model.embedding_cache
        assert len(twin.embedding_cache) == 0
        assert torch.equal(twin(**x).logits, model(**x).logits)
    assert set(twin.state_dict()) == set(base.state_dict())


def test_refusal_names_what_is_supported():
    with pytest.raises(ModelNotSupportedError, match="caches encoders called with token ids"):
        smash(zoo.load("tiny_gpt2").model, SmashConfig(["embedding_cache"], device="cpu"), verbose=False)


def test_real_minilm_sentences_repeat_exactly(tmp_path):
    loaded = zoo.load("minilm")
    tokenizer = loaded.tokenizer
    texts = ["How do I bake bread?", "Why is the sky blue?", "How do I bake bread?"]
    enc = dict(tokenizer(texts, padding=True, return_tensors="pt"))
    smashed = smash(loaded.model.eval(), SmashConfig(["embedding_cache"], device="cpu"), verbose=False)
    with torch.no_grad():
        reference = loaded.model(**enc)
        first = smashed(**enc)
        second = smashed(**enc)
    torch.testing.assert_close(first, reference, atol=1e-6, rtol=0)
    assert torch.equal(second, first) and smashed.embedding_cache.stats()["entries"] == 2
    smashed.save_pretrained(tmp_path / "m")
    again = SmashedModel.from_pretrained(tmp_path / "m")
    with torch.no_grad():
        assert torch.equal(again(**enc), again(**enc))
    assert again.embedding_cache.stats()["hits"] == 3 and again.embedding_cache.max_entries == 4096
