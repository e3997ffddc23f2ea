"""GGUF written piece by piece: the same tensors and metadata as the in-memory export, and llama.cpp runs it."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
import transformers

from slimkit import SmashConfig, SmashedModel, smash, smash_folder
from slimkit.engines.gguf import export_gguf
from slimkit.engines.quantization.lowbit import quantize_model_rtn
from slimkit.formats import WriteContext
from slimkit.formats.gguf_writer import GGUFWriter
from slimkit.zoo._hf import byte_tokenizer


def _contents(path):
    reader = gguf.GGUFReader(path)
    tensors = {t.name: (t.tensor_type.name, tuple(int(d) for d in t.shape), bytes(np.asarray(t.data).tobytes()))
               for t in reader.tensors}
    fields = {name: [bytes(np.asarray(part).tobytes()) for part in (field.parts[i] for i in field.data)]
              for name, field in reader.fields.items()}
    return tensors, fields


@pytest.mark.parametrize("dtype", ["f16", "q8_0"])
def test_the_gguf_writer_writes_what_export_gguf_writes(byte_llama_folder, tmp_path, dtype, monkeypatch):
    monkeypatch.setattr("slimkit.formats.gguf_writer._CHUNK_BYTES", 4096)  # row chunks on every matrix
    model = transformers.LlamaForCausalLM.from_pretrained(byte_llama_folder, dtype=torch.float32).eval()
    quantize_model_rtn(model, 4, 32)
    tokenizer = byte_tokenizer()
    export_gguf(model, tmp_path / "memory.gguf", tokenizer, dtype)
    writer = GGUFWriter(tmp_path / "stage", WriteContext(model, tokenizer, {"dtype": dtype}))
    tied = {"lm_head.weight": "model.embed_tokens.weight"}
    pieces = [("model.embed_tokens", {}), ("model.norm", {}), ("lm_head", tied)]
    pieces += [(f"model.layers.{i}", {}) for i in range(3)]
    for i, (prefix, tied) in enumerate(pieces):
        writer.write(f"piece-{i}", prefix, model.get_submodule(prefix), tied)
    summary = writer.finish([f"piece-{i}" for i in range(len(pieces))])
    assert summary["file_type"] == "MOSTLY_Q4_1" and summary["tensor_types"]["blk.0.ffn_down.weight"] == "Q4_1"
    assert "output.weight" not in summary["tensor_types"]  # tied: llama.cpp reuses token_embd
    streamed, memory = _contents(tmp_path / "stage" / "model.gguf"), _contents(tmp_path / "memory.gguf")
    assert streamed[0] == memory[0]
    assert streamed[1] == memory[1]


@pytest.mark.llamacpp
def test_streamed_rtn_with_llama_cpp_runs_like_the_in_memory_smash(byte_llama_folder, tmp_path):
    def config():
        return SmashConfig({"rtn": {"group_size": 32}, "llama_cpp": {"dtype": "f16", "n_threads": 1}})

    result = smash_folder(byte_llama_folder, config(), tmp_path / "out", stream=True, progress=False, verbose=False)
    assert result.format == "gguf"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["README.md", "model.gguf", "smash_config.json",
                                                                   "tokenizer"]
    card = (tmp_path / "out" / "README.md").read_text()
    assert "GGUF in a slimkit folder" in card and "llama-cli -m DIR/model.gguf" in card
    streamed = SmashedModel.from_pretrained(tmp_path / "out")
    model = transformers.LlamaForCausalLM.from_pretrained(byte_llama_folder, dtype=torch.float32).eval()
    cfg = config()
    cfg.add_tokenizer(str(byte_llama_folder))
    in_memory = smash(model, cfg, copy_model=False, verbose=False)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    assert torch.equal(streamed(ids).logits, in_memory(ids).logits)
    generated = streamed.generate(ids, max_new_tokens=4)
    assert generated.shape[-1] == 9
