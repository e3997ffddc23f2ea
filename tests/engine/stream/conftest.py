"""Model folders for the streaming tests: a ~20M-parameter Llama in 3 safetensors shards (fp32 and bf16)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import transformers

from slimkit import SmashConfig
from slimkit.data import DataModule, DictDataset

VOCAB = 8192


def llama_config(**overrides) -> transformers.LlamaConfig:
    base = dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=8, num_attention_heads=6,
                num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=256,
                architectures=["LlamaForCausalLM"], tie_word_embeddings=False)
    base.update(overrides)
    return transformers.LlamaConfig(**base)


def write_folder(folder: Path, dtype: torch.dtype = torch.float32, shards: int = 3, **overrides) -> Path:
    """A random-init Llama saved as ``shards`` safetensors shards with an index (as transformers writes them)."""
    with torch.device("meta"):  # transformers' own init takes seconds; seeded normal values are all tests need
        model = transformers.LlamaForCausalLM(llama_config(**overrides))
    model.to_empty(device="cpu")
    model.tie_weights()  # to_empty gave the tied head a tensor of its own
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():  # tied weights are one parameter, listed once
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02, generator=gen)
    model = model.to(dtype)
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    model.save_pretrained(folder, max_shard_size=f"{int(size * 1.2 / shards) // 1000}KB")
    return folder


class ByteTokenizer:
    """Token ids from character codes (a stand-in tokenizer: the tests need ids, not language)."""

    eos_token_id = 0

    def __call__(self, texts, add_special_tokens=False, **_):
        return {"input_ids": [[ord(c) % VOCAB for c in t] for t in texts]}


def calibration_data() -> DataModule:
    rng = random.Random(0)
    texts = [" ".join(str(rng.randint(0, 99999)) for _ in range(300)) for _ in range(4)]
    return DataModule(DictDataset({"text": texts}), None, None, lambda batch: batch)


def crash_once_staged(monkeypatch, writer_cls, key: str = "block-00001") -> None:
    """Make ``writer_cls.write`` raise KeyboardInterrupt once piece ``key`` is staged (the run record not yet saved).

    The patch undoes itself when it fires, so the next call of the same run resumes normally.
    """
    original = writer_cls.write

    def crash(self, piece, *args):
        original(self, piece, *args)
        if piece == key:
            monkeypatch.setattr(writer_cls, "write", original)
            raise KeyboardInterrupt

    monkeypatch.setattr(writer_cls, "write", crash)


def make_config(algorithm: str, **hyperparameters) -> SmashConfig:
    """A config for ``algorithm`` with group size 64 and small, fast calibration (4 x 64 tokens, no clip search)."""
    hps = {"group_size": 64, **hyperparameters}
    if algorithm in ("gptq", "awq"):
        hps = {"n_calibration_samples": 4, "seq_len": 64, "clip_search": False, **hps}
    if algorithm == "awq":
        hps = {"n_grid": 4, **hps}
    cfg = SmashConfig({algorithm: hps}, device="cpu")  # a CPU reference on every machine (auto picks a GPU)
    if algorithm in ("gptq", "awq"):
        cfg.add_tokenizer(ByteTokenizer())
        cfg.add_data(calibration_data())
    return cfg


@pytest.fixture(scope="session")
def llama_folder(tmp_path_factory) -> Path:
    """fp32, 8 blocks, ~19M parameters (76 MB), 3 shards."""
    return write_folder(tmp_path_factory.mktemp("llama") / "model")


@pytest.fixture(scope="session")
def llama_bf16_folder(tmp_path_factory) -> Path:
    """The same model stored in bfloat16."""
    return write_folder(tmp_path_factory.mktemp("llama_bf16") / "model", torch.bfloat16)


def stream(folder: Path, out: Path, algorithm: str, **kwargs):
    """``smash_folder`` streaming ``algorithm`` (see :func:`make_config`) quietly."""
    from slimkit import smash_folder

    return smash_folder(folder, make_config(algorithm), out, stream=True, progress=False, verbose=False, **kwargs)


@pytest.fixture(scope="session")
def gptq_streamed(llama_folder, tmp_path_factory) -> Path:
    """The fp32 fixture streamed through GPTQ (calibration inputs in RAM): the reference other runs must equal."""
    out = tmp_path_factory.mktemp("gptq") / "out"
    stream(llama_folder, out, "gptq")
    return out


@pytest.fixture(scope="session")
def byte_llama_folder(tmp_path_factory) -> Path:
    """A small Llama with tied embeddings and the zoo's byte tokenizer saved beside it (vocabulary 256)."""
    from slimkit.zoo._hf import byte_tokenizer

    folder = write_folder(tmp_path_factory.mktemp("byte_llama") / "model", shards=2, vocab_size=256, hidden_size=128,
                          intermediate_size=256, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                          tie_word_embeddings=True, bos_token_id=1, eos_token_id=0, pad_token_id=0)
    byte_tokenizer().save_pretrained(folder)
    return folder
