"""Streaming into compressed-tensors / GPTQ checkpoints: the same folder the in-memory export writes."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file

from slimkit import SmashConfig, SmashedModel, smash, smash_folder
from slimkit.errors import ConfigError
from slimkit.formats import RUN_FILE
from tests.engine.stream.conftest import crash_once_staged


def _tensors(folder):
    out = {}
    for file in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(file)))
    return out


def _in_memory_export(folder, out, cfg, fmt):
    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    cfg.add_tokenizer(str(folder))
    smashed = smash(model, cfg, copy_model=False, verbose=False)
    smashed.save_pretrained(out, format=fmt)
    return smashed


@pytest.mark.parametrize(("fmt", "sym"), [("compressed-tensors", True), ("compressed-tensors", False),
                                          ("gptq", False)])
def test_streamed_checkpoint_equals_the_in_memory_export(byte_llama_folder, tmp_path, fmt, sym):
    recipe = {"rtn": {"bits": 4, "group_size": 32, "sym": sym}}
    result = smash_folder(byte_llama_folder, SmashConfig(recipe), tmp_path / "streamed", stream=True,
                          save_format=fmt, progress=False, verbose=False)
    assert result.format == fmt and result.blocks == 3
    smashed = _in_memory_export(byte_llama_folder, tmp_path / "memory", SmashConfig(recipe), fmt)
    streamed, memory = tmp_path / "streamed", tmp_path / "memory"
    names = {p.name for p in streamed.iterdir()}
    assert names - {RUN_FILE} == {p.name for p in memory.iterdir()}  # same files, plus the run record
    assert "smash_config.json" not in names  # not a slimkit save: transformers and vLLM open it as theirs
    assert json.loads((streamed / "config.json").read_text()) == json.loads((memory / "config.json").read_text())
    a, b = _tensors(streamed), _tensors(memory)
    assert a.keys() == b.keys()
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
    if fmt == "compressed-tensors":
        assert ("model.layers.0.mlp.up_proj.weight_zero_point" in a) is not sym
    card = (streamed / "README.md").read_text()
    assert fmt in card and "rtn" in card
    reloaded = SmashedModel.from_pretrained(streamed)  # the import path: packed layers, no re-quantizing
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, smashed(ids).logits)


def test_a_recipe_the_format_cannot_hold_is_refused_before_anything_is_written(byte_llama_folder, tmp_path):
    with pytest.raises(ConfigError, match="compressed-tensors: hqq makes fractional zero points"):
        smash_folder(byte_llama_folder, SmashConfig({"hqq": {"bits": 4, "group_size": 32}}), tmp_path / "out",
                     stream=True, save_format="compressed-tensors", progress=False, verbose=False)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


@pytest.mark.parametrize("stream", [True, False])
def test_a_group_size_that_does_not_split_the_rows_is_refused_before_quantizing(tmp_path, stream):
    from tests.engine.stream.conftest import write_folder

    folder = write_folder(tmp_path / "narrow", shards=1, vocab_size=64, hidden_size=96, intermediate_size=192,
                          num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2)
    with pytest.raises(ConfigError, match=r"gptq_group_size=64: 96 input columns \(model.layers.0.self_attn.q_proj"):
        smash_folder(folder, SmashConfig({"gptq": {"bits": 4, "group_size": 64}}), tmp_path / "out", stream=stream,
                     save_format="compressed-tensors", progress=False, verbose=False)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_a_finished_checkpoint_is_recognised_and_another_config_refused(byte_llama_folder, tmp_path):
    out = tmp_path / "out"
    recipe = {"rtn": {"bits": 4, "group_size": 32}}
    smash_folder(byte_llama_folder, SmashConfig(recipe), out, stream=True, save_format="gptq", progress=False,
                 verbose=False)
    again = smash_folder(byte_llama_folder, SmashConfig(recipe), out, stream=True, save_format="gptq",
                         progress=False, verbose=False)
    assert again.resumed_at == 3
    with pytest.raises(ConfigError, match="already holds a saved model of another model or configuration"):
        smash_folder(byte_llama_folder, SmashConfig({"rtn": {"bits": 8, "group_size": 32}}), out, stream=True,
                     save_format="gptq", progress=False, verbose=False)


def test_a_checkpoint_larger_than_one_shard_gets_shards_and_an_index(byte_llama_folder, tmp_path, monkeypatch):
    from slimkit.formats.hf_writer import HFCheckpointWriter

    monkeypatch.setattr(HFCheckpointWriter, "max_shard_bytes", 200_000)  # the embedding alone is 131 kB
    recipe = {"rtn": {"bits": 4, "group_size": 32}}
    smash_folder(byte_llama_folder, SmashConfig(recipe), tmp_path / "streamed", stream=True,
                 save_format="compressed-tensors", progress=False, verbose=False)
    _in_memory_export(byte_llama_folder, tmp_path / "memory", SmashConfig(recipe), "compressed-tensors")
    streamed = tmp_path / "streamed"
    shards = sorted(p.name for p in streamed.glob("*.safetensors"))
    assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((streamed / "model.safetensors.index.json").read_text())
    a, b = _tensors(streamed), _tensors(tmp_path / "memory")
    assert set(index["weight_map"]) == set(a) == set(b)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in a.values())
    assert all(torch.equal(a[k], b[k]) for k in a)
    SmashedModel.from_pretrained(streamed)  # the importer reads the index


def test_a_crashed_checkpoint_run_resumes_to_identical_files(byte_llama_folder, tmp_path, monkeypatch):
    from slimkit.formats.hf_writer import HFCheckpointWriter

    recipe = {"rtn": {"bits": 4, "group_size": 32}}

    def run(out):
        return smash_folder(byte_llama_folder, SmashConfig(recipe), out, stream=True, save_format="gptq",
                            progress=False, verbose=False)

    run(tmp_path / "whole")
    crash_once_staged(monkeypatch, HFCheckpointWriter)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "out")
    assert run(tmp_path / "out").resumed_at == 1  # block 1 was staged but not recorded: redone, same bytes
    for name in ("model.safetensors", "config.json"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    card = (tmp_path / "out" / "README.md").read_text()  # block 0, packed by the first process, is counted
    assert "21 layer(s): 4-bit, groups of 32, asymmetric" in card and "kept in float: lm_head\n" in card
