"""Packed batching: sentences of very different lengths in one padding-free sequence give their unbatched embeddings."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.engines.batching import attach_dynamic_batcher
from slimkit.engines.batching.packing import (
    SEGMENTED_ATTENTION,
    Packer,
    block_diagonal_mask,
    pack_reason,
    split_packs,
)
from slimkit.errors import ModelNotSupportedError
from tests.algorithms.models import tiny_sentence_encoder


def _calls(lengths, seed=0, vocab=256):
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        ids = torch.randint(1, vocab, (1, n), generator=g)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)})
    return out


def _concurrently(model, calls):
    barrier, out = threading.Barrier(len(calls)), [None] * len(calls)

    def go(i):
        barrier.wait()
        with torch.inference_mode():
            out[i] = model(**calls[i])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def test_mask_and_pack_split():
    mask = block_diagonal_mask([2, 1], torch.float32, torch.device("cpu"))[0, 0]
    low = torch.finfo(torch.float32).min
    assert torch.equal(mask, torch.tensor([[0, 0, low], [0, 0, low], [low, low, 0]]))
    assert split_packs([10, 20, 5, 40, 3], 30) == [[0, 1], [2], [3], [4]]
    assert split_packs([10, 20], 30) == [[0, 1]]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_equals_alone_on_a_tiny_encoder(attention):
    model = tiny_sentence_encoder().eval()
    model.bert.config._attn_implementation = attention
    calls = _calls([3, 40, 7, 1, 25, 12, 60, 9])
    padded = {"input_ids": torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]]),
              "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])}
    with torch.inference_mode():
        alone, padded_before = [model(**c) for c in calls], model(**padded)
        for cap in (16, 64, 10_000):  # several packs, a sentence longer than the cap alone, one pack
            packer = Packer(model, cap)
            assert packer.segmented == (attention == "sdpa")
            got = packer.run([packer.segments((), c) for c in calls])
            for a, b in zip(alone, got, strict=True):
                assert b.shape == a.shape == (1, 64)
                assert (a - b).abs().max() < 2e-6
        assert torch.equal(model(**padded), padded_before)  # unpacked calls run as before the switch
    if attention == "sdpa":  # the in-memory switch is not written to the saved config
        assert model.bert.config._attn_implementation == SEGMENTED_ATTENTION
        assert SEGMENTED_ATTENTION not in model.bert.config.to_json_string()


def test_only_right_padded_calls_pack():
    packer = Packer(tiny_sentence_encoder().eval())
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 0, 0]])
    right = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    segments = packer.segments((ids,), {"attention_mask": right})
    assert [s[0].tolist() for s in segments] == [[5, 6, 7, 8], [5, 6]]
    assert packer.segments((ids,), {"attention_mask": torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])}) is None
    assert packer.segments((ids,), {"attention_mask": torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]])}) is None
    assert packer.segments((), {"input_ids": ids.float()}) is None
    assert packer.segments((), {"inputs_embeds": ids}) is None


def test_batcher_packs_concurrent_callers_and_pads_what_cannot_pack():
    encoder = tiny_sentence_encoder().eval()
    model = attach_dynamic_batcher(copy.deepcopy(encoder), 16, 300.0, 64, pack="auto", max_pack_tokens=64)
    calls = _calls([4, 50, 9, 31, 2, 17])
    out = _concurrently(model, calls)
    with torch.inference_mode():
        for call, got in zip(calls, out, strict=True):
            torch.testing.assert_close(got, encoder(**call), atol=2e-6, rtol=0)
    stats = model.dynamic_batcher.stats()
    assert stats["batches"] == 1 and stats["packed_forwards"] == 1 and stats["pack"] == "auto"

    left = {"input_ids": torch.tensor([[0, 0, 7, 8]]), "attention_mask": torch.tensor([[0, 0, 1, 1]])}
    out = _concurrently(model, [left, {k: v[:, 2:] for k, v in left.items()}])
    with torch.inference_mode():
        torch.testing.assert_close(out[0], encoder(**left), atol=2e-6, rtol=0)
    assert model.dynamic_batcher.stats()["packed_forwards"] == 1  # left padding: this batch was padded instead


def test_models_that_cannot_pack_fall_back_or_are_refused():
    classifier = zoo.load("tiny_bert").model.eval()
    assert "SentenceEncoder" in pack_reason(classifier) and "BertForSequenceClassification" in pack_reason(classifier)
    decoder = tiny_sentence_encoder()
    decoder.bert.config.is_decoder = True
    assert "decoder" in pack_reason(decoder)
    with pytest.raises(ModelNotSupportedError, match="pack='on' but this model cannot be packed.*pack='auto'"):
        attach_dynamic_batcher(classifier, 8, 1.0, 8, pack="on")
    with pytest.raises(ModelNotSupportedError, match="needs a sentence encoder.*got BertForSequenceClassification"):
        smash(copy.deepcopy(classifier), SmashConfig({"dynamic_batch": {"pack": "on"}}, device="cpu"), verbose=False)
    model = attach_dynamic_batcher(copy.deepcopy(classifier), 8, 300.0, 8, pack="auto")
    calls = [{k: v for k, v in c.items() if k != "token_type_ids"} for c in _calls([5, 9], vocab=250)]
    out = _concurrently(model, calls)
    with torch.inference_mode():
        for call, got in zip(calls, out, strict=True):
            torch.testing.assert_close(got.logits, classifier(**call).logits, atol=1e-5, rtol=1e-4)
    assert model.dynamic_batcher.stats()["packed_forwards"] == 0
    with pytest.raises(ValueError, match="pack in"):
        attach_dynamic_batcher(classifier, 8, 1.0, 8, pack="sometimes")


def test_pack_settings_save_and_reload(tmp_path):
    cfg = SmashConfig({"dynamic_batch": {"pack": "on", "max_pack_tokens": 128}}, device="cpu")
    smashed = smash(tiny_sentence_encoder().eval(), cfg, verbose=False)
    smashed.save_pretrained(tmp_path / "saved")
    again = SmashedModel.from_pretrained(tmp_path / "saved", model=tiny_sentence_encoder)
    batcher = again.dynamic_batcher
    assert (batcher.pack, batcher.max_pack_tokens) == ("on", 128)
    assert SmashConfig.from_json(tmp_path / "saved")["dynamic_batch_pack"] == "on"


def test_real_minilm_sentences_of_very_different_lengths():
    loaded = zoo.load("minilm")
    model, tokenizer = loaded.model.eval(), loaded.tokenizer
    sentences = [s for pair in zoo.sentence_pairs()[:6] for s in pair]
    sentences += ["Hi.", " ".join(s for pair in zoo.sentence_pairs()[6:12] for s in pair)]  # 3 and ~200 tokens
    calls = [dict(tokenizer(s, return_tensors="pt")) for s in sentences]
    lengths = sorted(c["input_ids"].shape[1] for c in calls)
    assert lengths[0] <= 4 and lengths[-1] >= 150
    with torch.inference_mode():
        alone = torch.cat([model(**c) for c in calls])
        packer = Packer(model, 256)
        packed = torch.cat(packer.run([packer.segments((), c) for c in calls]))
    assert torch.nn.functional.cosine_similarity(packed, alone).min() >= 0.99999
    assert (packed - alone).abs().max() < 1e-5
