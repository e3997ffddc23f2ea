"""Pruna's c_generate / c_whisper (CTranslate2) and kvpress at their boundaries: bad hyperparameters, missing packages,
refusals."""

from __future__ import annotations

import shutil
import sys
from types import SimpleNamespace

import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.errors import (
    ConfigError,
    MissingComponentError,
    MissingPackageError,
    ModelNotSupportedError,
    SaveLoadError,
)
from slimkit.zoo._hf import byte_tokenizer
from tests.algorithms.models import get_model, tiny_whisper, whisper_tokenizer

PROMPT = torch.randint(1, 256, (1, 24), generator=torch.Generator().manual_seed(0))


def _smash(algorithm: str, tokenizer: bool = True, model=None, **hyperparameters):
    cfg = SmashConfig({algorithm: hyperparameters}, device="cpu")
    if tokenizer:
        cfg.add_tokenizer(byte_tokenizer())
    return smash(zoo.load("tiny_llama").model.eval() if model is None else model, cfg, verbose=False)


@pytest.mark.parametrize(("key", "value"), [
    ("c_generate_weight_bits", 4), ("c_generate_weight_bits", "int8"), ("c_generate_n_threads", -1),
    ("kvpress_compression_ratio", 1.5), ("kvpress_compression_ratio", -0.1), ("kvpress_press_type", "KnormPres"),
    ("kvpress_press_type", "ThinKPress"), ("kvpress_press_kwargs", ["window_size"]), ("kvpress_press_kwargs", {1: 2}),
])
def test_out_of_range_hyperparameters_name_the_key(key, value):
    with pytest.raises(ConfigError, match=key):
        SmashConfig()[key] = value


@pytest.mark.parametrize(("algorithm", "module", "extra"), [("c_generate", "ctranslate2", "ctranslate2"),
                                                           ("c_whisper", "ctranslate2", "ctranslate2"),
                                                           ("kvpress", "kvpress", "kvpress")])
def test_a_missing_library_names_the_extra(monkeypatch, algorithm, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if the package were not installed
    with pytest.raises(MissingPackageError, match=rf"pip install 'slimkit\[{extra}\]'"):
        if algorithm == "c_whisper":
            _smash_whisper()
        else:
            _smash(algorithm)


def _smash_whisper(tokenizer: bool = True, model=None, processor=None, **hyperparameters):
    cfg = SmashConfig({"c_whisper": {"n_threads": 1, **hyperparameters}}, device="cpu")
    if tokenizer:
        cfg.add_tokenizer(whisper_tokenizer())
    if processor is not None:  # Pruna's way: the processor, whose tokenizer gives the vocabulary
        cfg.add_processor(processor)
    return smash(tiny_whisper() if model is None else model, cfg, verbose=False)


def test_c_whisper_refuses_other_models_and_needs_the_vocabulary():
    with pytest.raises(ModelNotSupportedError, match="c_whisper does not support this model .BartForConditional"
                                                     "Generation.. It converts Hugging Face WhisperForConditional"):
        _smash_whisper(model=get_model("tiny_bart")[0])
    with pytest.raises(MissingComponentError, match=r"c_whisper needs the model's processor \(cfg.add_processor"):
        _smash_whisper(tokenizer=False)
    smashed = _smash_whisper(tokenizer=False, processor=SimpleNamespace(tokenizer=whisper_tokenizer()))
    assert smashed.model.vocabulary[257] == "<|startoftranscript|>" and len(smashed.model.vocabulary) == 264


def test_c_whisper_refuses_bad_generate_calls_and_forward():
    smashed, features = _smash_whisper(weight_bits=32), torch.randn(1, 16, 32)
    assert smashed.generate(features, max_new_tokens=3).shape == (1, 3)
    for call, message in ((lambda: smashed.generate(features[0]), r"input_features as a \[batch, n_mels, frames\]"),
                          (lambda: smashed.generate(features, do_sample=True), r"does not take \['do_sample'\]"),
                          (lambda: smashed.generate(features, task="summarize"), "task is 'transcribe' or"),
                          (lambda: smashed.generate(features, max_new_tokens=0), "max_new_tokens must be >= 1"),
                          (lambda: smashed(input_features=features), "no teacher-forced logits: call generate")):
        with pytest.raises(ConfigError, match=message):
            call()


def test_c_generate_needs_the_tokenizer_and_refuses_bad_generate_calls():
    with pytest.raises(MissingComponentError, match="tokenizer"):
        _smash("c_generate", tokenizer=False)
    smashed = _smash("c_generate", n_threads=1)
    with pytest.raises(ConfigError, match=r"does not take \['num_beams'\]"):
        smashed.generate(PROMPT, num_beams=2)
    with pytest.raises(ConfigError, match="Token id 300 is outside the converted model's vocabulary of 256"):
        smashed.generate(torch.tensor([[1, 300]]))
    with pytest.raises(ConfigError, match=r"input_ids as a \[batch, seq\] tensor"):
        smashed(input_ids=[[1, 2]])


def test_c_generate_streams_samples_and_pads_masked_rows():
    from transformers.generation.streamers import BaseStreamer

    class Collect(BaseStreamer):
        def __init__(self):
            self.calls = []

        def put(self, value):
            self.calls.append(value.tolist())

        def end(self):
            self.calls.append("end")

    smashed, streamer = _smash("c_generate", n_threads=1), Collect()
    out = smashed.generate(PROMPT, max_new_tokens=5, streamer=streamer)
    assert streamer.calls[0] == PROMPT.tolist() and streamer.calls[-1] == "end"
    assert [c[0] for c in streamer.calls[1:-1]] == out[0, 24:].tolist() and len(streamer.calls) == 7
    sampled = smashed.generate(PROMPT, max_new_tokens=6, do_sample=True, top_k=5, temperature=2.0)
    assert sampled.shape == (1, 30) and torch.equal(sampled[:, :24], PROMPT)
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[1, 20:] = 0  # the second row is 20 tokens long: its logits there are zeros, the rest match its own run
    batch = torch.cat([PROMPT, PROMPT])
    logits = smashed(input_ids=batch, attention_mask=mask).logits
    assert torch.equal(logits[1, 20:], torch.zeros(4, 256))
    torch.testing.assert_close(logits[1, :20], smashed(input_ids=PROMPT[:, :20]).logits[0])


def test_c_generate_damaged_save_is_refused_naming_the_file(tmp_path):
    _smash("c_generate", n_threads=1).save_pretrained(tmp_path / "ok")
    for name, damage in (("model.bin", lambda f: f.write_bytes(f.read_bytes()[:100])),
                         ("vocabulary.json", lambda f: f.write_text("{")),
                         ("transformers_config.json", lambda f: f.write_text("[1]")),
                         ("config.json", lambda f: f.unlink())):
        folder = tmp_path / name
        shutil.copytree(tmp_path / "ok", folder)
        damage(folder / "ctranslate2" / name)
        with pytest.raises(SaveLoadError, match=rf"ctranslate2.*{name}|{name}.*ctranslate2|CTranslate2 cannot load"):
            SmashedModel.from_pretrained(folder)


@pytest.mark.parametrize(("hyperparameters", "message"), [
    ({"press_type": "KnormPress", "press_kwargs": {"window": 4}},
     r"kvpress_press_kwargs has \['window'\], which KnormPress does not take"),
    ({"press_type": "SnapKVPress", "press_kwargs": {"compression_ratio": 0.2}}, "compression_ratio is kvpress_compre"),
    ({"compression_ratio": 1.0}, "would remove the whole prompt cache"),
    ({"press_type": "LagKVPress", "press_kwargs": {"n_sink": 0.5}}, r"\['n_sink'\]=0.5: LagKVPress's n_sink is int"),
    ({"press_type": "KVzipPress"}, "not a local folder with a tokenizer"),
    ({"press_type": "FinchPress"}, "adds a delimiter token"),
    ({"press_type": "ObservedAttentionPress"}, "attn_implementation='eager'"),
])
def test_kvpress_refuses_what_it_cannot_run(hyperparameters, message):
    with pytest.raises(ConfigError, match=message):
        _smash("kvpress", **hyperparameters)


def test_kvpress_window_longer_than_the_prompt_is_a_clear_error_and_a_short_window_works():
    smashed = _smash("kvpress", press_type="SnapKVPress")  # window_size 64 > the 24-token prompt
    with pytest.raises(ConfigError, match=r"SnapKVPress refused this generation \(AssertionError: Query length 24 "):
        smashed.generate(PROMPT, max_new_tokens=2)
    smashed = _smash("kvpress", press_type="SnapKVPress", compression_ratio=0.25, press_kwargs={"window_size": 8})
    assert smashed.generate(PROMPT, max_new_tokens=2, do_sample=False).shape == (1, 26)
    assert smashed.kv_press.stats() == {"prompt_tokens": 24, "kept_tokens": 18, "prefills": 1}
    smashed = _smash("kvpress", press_type="CompactorPress")  # its sink tokens leave nothing to score in 24
    with pytest.raises(ConfigError, match=r"CompactorPress refused this generation \(RuntimeError"):
        smashed.generate(PROMPT[:, :8], max_new_tokens=2)
