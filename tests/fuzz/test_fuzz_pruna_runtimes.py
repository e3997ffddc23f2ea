"""Pruna's CTranslate2 compilers and kvpress at their boundaries, fuzzed.

Saved CTranslate2 folders, damaged (truncated, bit-flipped, replaced, deleted files, a forged checksum table): they
load and run, or are refused with a SaveLoadError naming the file, before CTranslate2's loader (which crashes the
process on a damaged ``model.bin``) sees them. kvpress hyperparameters (press, ratio, free ``press_kwargs``): the
model generates with the press, or a ConfigError names the key.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.algorithms.caching.kvpress import NEEDS_HUB, PRESS_TYPES
from slimkit.zoo._hf import byte_tokenizer
from tests.algorithms.models import _seq2seq_inputs, tiny_bart
from tests.fuzz._fuzz import clear_or_ok, examples
from tests.fuzz.test_fuzz_smash_config import json_values

IDS = torch.randint(1, 256, (1, 12), generator=torch.Generator().manual_seed(0))
FILES = ("model.bin", "config.json", "vocabulary.json", "shared_vocabulary.json", "transformers_config.json")
WORDS = ("ctranslate2", "CTranslate2", "smash_config.json")


def _tiny_llama() -> torch.nn.Module:
    return zoo.load("tiny_llama").model.eval()


@pytest.fixture(scope="module")
def saves(tmp_path_factory):
    root = tmp_path_factory.mktemp("ct2")
    for name, algorithm, model in (("generate", "c_generate", _tiny_llama()),
                                   ("translate", "c_translate", tiny_bart())):
        cfg = SmashConfig({algorithm: {"n_threads": 1}}, device="cpu")
        cfg.add_tokenizer(byte_tokenizer())
        smash(model, cfg, verbose=False).save_pretrained(root / name)
    return root


def _damage(file: Path, draw) -> None:
    data = file.read_bytes()
    how = draw(st.sampled_from(["truncate", "flip", "json", "delete", "append"]))
    if how == "truncate":
        file.write_bytes(data[: draw(st.integers(0, max(len(data) - 1, 0)))])
    elif how == "flip" and data:
        raw = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            raw[draw(st.integers(0, len(raw) - 1))] ^= 1 << draw(st.integers(0, 7))
        file.write_bytes(bytes(raw))
    elif how == "json":
        file.write_text(json.dumps(draw(json_values)))
    elif how == "delete":
        file.unlink()
    else:
        file.write_bytes(data + draw(st.binary(min_size=1, max_size=64)))


@pytest.mark.slow  # 500 loads: ~30 s on 2 cores
@examples(500)
@given(st.sampled_from(["generate", "translate"]), st.sampled_from(FILES + ("files_sha256",)), st.data())
def test_damaged_ctranslate2_save_loads_or_is_refused(saves, name, target, data):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / name
        shutil.copytree(saves / name, folder)
        if target == "files_sha256":  # a forged or broken checksum table
            tree = json.loads((folder / "smash_config.json").read_text())
            tree["applied"][-1]["state"]["files_sha256"] = data.draw(json_values)
            (folder / "smash_config.json").write_text(json.dumps(tree))
        elif (folder / "ctranslate2" / target).is_file():
            _damage(folder / "ctranslate2" / target, data.draw)
        result = clear_or_ok("ctranslate2_saved_dir", lambda: SmashedModel.from_pretrained(folder), *WORDS)
        if isinstance(result, SmashedModel):
            inputs = {"input_ids": IDS} if name == "generate" else _seq2seq_inputs()
            assert torch.isfinite(result(**inputs).logits).all()
            assert result.generate(inputs["input_ids"], max_new_tokens=2).shape[0] == inputs["input_ids"].shape[0]


@pytest.fixture(scope="module")
def llama():
    return _tiny_llama()


OFFLINE_PRESSES = [p for p in PRESS_TYPES if p not in NEEDS_HUB]
press_kwargs = st.one_of(st.none(), st.dictionaries(
    st.sampled_from(["window_size", "n_sink", "compression_ratio", "alpha", "n_future_positions", "epsilon",
                     "lag_size", "kernel_size", "bogus"]),
    st.one_of(st.integers(-2, 70), st.floats(-1, 2), st.booleans(), st.none(), st.text(max_size=3)), max_size=2))


@pytest.mark.slow  # 300 smashes and generations: ~40 s on 2 cores
@examples(300)
@given(st.sampled_from(OFFLINE_PRESSES), st.floats(-0.5, 1.5), press_kwargs)
def test_kvpress_hyperparameters_generate_or_name_the_key(llama, press_type, ratio, kwargs):
    def run():
        cfg = SmashConfig({"kvpress": {"press_type": press_type, "compression_ratio": ratio, "press_kwargs": kwargs}},
                          device="cpu")
        smashed = smash(llama, cfg, verbose=False)
        out = smashed.generate(IDS, max_new_tokens=2, do_sample=False)
        assert out.shape == (1, 14)
        stats = smashed.kv_press.stats()
        assert stats["prompt_tokens"] == 12 and stats["kept_tokens"] <= 12
        return smashed

    clear_or_ok("kvpress_hyperparameters", run, "kvpress")
