from __future__ import annotations

import pytest
import torch

from slimkit import zoo
from slimkit.zoo.minilm import SentenceEncoder


@pytest.fixture(scope="module")
def minilm():
    return zoo.load("minilm")


def test_minilm_inputs_and_unit_norm_embeddings(minilm):
    inputs = minilm.example_inputs
    assert set(inputs) == {"input_ids", "attention_mask", "token_type_ids"}
    assert all(t.shape == (32, 128) for t in inputs.values())
    assert 0 < inputs["attention_mask"].sum(1).min() < 128  # real sentences, padded to max_length
    with torch.no_grad():
        emb = minilm.model(**inputs)
    assert emb.shape == (32, 384)
    assert torch.allclose(emb.norm(dim=1), torch.ones(32), atol=1e-5)
    assert isinstance(minilm.model, SentenceEncoder) and minilm.model.bert.config.hidden_size == 384
    assert minilm.tokenizer is not None and minilm.task == "sentence_embedding"


def test_minilm_matching_pair_beats_unrelated_pair(minilm):
    pairs = zoo.sentence_pairs()
    assert len(pairs) == 16
    queries = minilm.model.encode([q for q, _ in pairs], minilm.tokenizer)
    docs = minilm.model.encode([d for _, d in pairs], minilm.tokenizer)
    sims = queries @ docs.T
    # "Why is the sky blue?" is far closer to the light-scattering answer than to the bread recipe
    assert sims[3, 3] > sims[3, 0] + 0.3
    assert (sims.argmax(1) == torch.arange(16)).sum() >= 15  # retrieval top-1 over 16 pairs
    assert sims.diagonal().mean() > 0.5 > sims.fill_diagonal_(0).max()


def test_minilm_padding_does_not_change_embedding(minilm):
    tok = minilm.tokenizer
    text = ["Mean pooling must ignore padding tokens."]
    short = tok(text, return_tensors="pt")
    long = tok(text, padding="max_length", max_length=64, return_tensors="pt")
    with torch.no_grad():
        a, b = minilm.model(**short), minilm.model(**long)
    assert torch.allclose(a, b, atol=1e-5)


def test_minilm_batch_kwargs():
    zm = zoo.load("minilm", batch_size=40, seq_len=16)
    assert zm.example_inputs["input_ids"].shape == (40, 16)
    assert torch.equal(zm.example_inputs["input_ids"][0], zm.example_inputs["input_ids"][32])  # sentences cycle


def test_minilm_build_matches_load_keys_and_shapes(minilm):
    built = zoo.build("minilm")
    loaded = {k: v.shape for k, v in minilm.model.state_dict().items()}
    assert {k: v.shape for k, v in built.state_dict().items()} == loaded
    assert "bert.embeddings.word_embeddings.weight" in loaded and len(loaded) > 100
    # random init: same architecture, different weights; loading strictly makes them equal
    w = "bert.encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(built.state_dict()[w], minilm.model.state_dict()[w])
    built.load_state_dict(minilm.model.state_dict(), strict=True)
    few = {k: v[:4, :32] for k, v in minilm.example_inputs.items()}
    with torch.no_grad():
        assert torch.allclose(built.eval()(**few), minilm.model(**few))


def test_minilm_matches_sentence_transformers(minilm, monkeypatch):
    import sentence_transformers as st
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from slimkit.zoo.minilm import model_path

    reference = st.SentenceTransformer(str(model_path()), device="cpu")
    sentences = [s for pair in zoo.sentence_pairs()[:4] for s in pair]
    expected = torch.as_tensor(reference.encode(sentences, normalize_embeddings=True))
    ours = minilm.model.encode(sentences, minilm.tokenizer)
    assert torch.allclose(ours, expected, atol=1e-4)
