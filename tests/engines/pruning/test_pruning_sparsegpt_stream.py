"""SparseGPT and Wanda streamed block by block from a model folder write what the in-memory smash saves."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file

from slimkit import SmashConfig, SmashedModel, smash, smash_folder
from slimkit.zoo._hf import byte_tokenizer
from tests.algorithms.testers.lowbit import ByteTokenizer
from tests.engine.stream.conftest import write_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A 3-block Llama in 2 safetensors shards with the zoo's byte tokenizer (vocabulary 256) beside it."""
    out = write_folder(tmp_path_factory.mktemp("byte_llama") / "model", shards=2, vocab_size=256, hidden_size=128,
                       intermediate_size=256, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                       tie_word_embeddings=True, bos_token_id=1, eos_token_id=0, pad_token_id=0)
    byte_tokenizer().save_pretrained(out)
    return out


def _config(algorithm: str, **hps) -> SmashConfig:
    cfg = SmashConfig({algorithm: {"n_calibration_samples": 4, "seq_len": 64, **hps}}, device="cpu")
    cfg.add_tokenizer(ByteTokenizer())
    cfg.add_data("PyDocText")
    return cfg


@pytest.mark.parametrize(("algorithm", "hps"), [("sparsegpt", {"mask_structure": "2:4"}),
                                                ("wanda", {"sparsity": 0.5}),
                                                pytest.param("sparsegpt", {"bits": 4, "group_size": 64},
                                                             marks=pytest.mark.slow)])
def test_streaming_equals_the_in_memory_smash(folder, tmp_path, algorithm, hps):
    smash_folder(folder, _config(algorithm, **hps), tmp_path / "streamed", stream=True, progress=False,
                 verbose=False)
    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    smashed = smash(model, _config(algorithm, **hps), copy_model=False, verbose=False)
    smashed.save_pretrained(tmp_path / "memory")
    a = load_file(str(tmp_path / "streamed" / "model.safetensors"))
    b = load_file(str(tmp_path / "memory" / "model.safetensors"))
    assert a.keys() == b.keys() and [k for k in a if not torch.equal(a[k], b[k])] == []
    streamed = json.loads((tmp_path / "streamed" / "smash_config.json").read_text())["applied"][0]["state"]
    memory = json.loads((tmp_path / "memory" / "smash_config.json").read_text())["applied"][0]["state"]
    assert streamed == memory
    assert len(streamed["sparsity"]) == 3 * 7 and min(streamed["sparsity"].values()) >= 0.5
    assert streamed["coverage"]["quantized_layers"] == 3 * 7
    assert ("model.layers.0.mlp.down_proj.qweight" in a) == ("bits" in hps)
    reloaded = SmashedModel.from_pretrained(tmp_path / "streamed")
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, smashed(ids).logits)
