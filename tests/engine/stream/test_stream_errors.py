"""Bad input to a streaming smash: a clear error before anything is written, and nothing half-written after."""

from __future__ import annotations

import errno
import json
import shutil

import pytest
import torch

from slimkit import SmashConfig, smash_folder
from slimkit.engine.stream import skeleton as skeleton_module
from slimkit.errors import ConfigError, ModelNotSupportedError, SaveLoadError
from slimkit.formats import slimkit_writer as slimkit_format
from slimkit.zoo.sources import load_source
from tests.engine.stream.conftest import make_config, stream


def _no_unpickling(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("a pickle file was opened")

    monkeypatch.setattr(torch, "load", refuse)


def test_a_folder_with_only_pickle_weights_is_refused_with_the_conversion(llama_folder, tmp_path, monkeypatch):
    folder = tmp_path / "pickled"
    folder.mkdir()
    shutil.copy(llama_folder / "config.json", folder / "config.json")
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04 not read")
    _no_unpickling(monkeypatch)
    with pytest.raises(ConfigError, match=r"pytorch_model\.bin.*never unpickles.*save_pretrained") as info:
        smash_folder(folder, make_config("rtn"), tmp_path / "out", stream=True, verbose=False)
    assert "use_safetensors=False" in str(info.value)
    with pytest.raises(ConfigError, match="never unpickles"):  # the in-memory path refuses it the same way
        load_source(folder)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_a_missing_shard_is_named(llama_folder, tmp_path):
    folder = tmp_path / "partial"
    shutil.copytree(llama_folder, folder)
    missing = sorted(folder.glob("model-*.safetensors"))[1]
    missing.unlink()
    with pytest.raises(ConfigError, match=f"lists shards that are not in .*{missing.name}"):
        stream(folder, tmp_path / "out", "rtn")


def test_an_architecture_without_blocks_lists_its_top_level_modules(llama_folder, tmp_path, monkeypatch):
    def no_blocks(model):
        raise ModelNotSupportedError(f"{type(model).__name__} has no list of transformer blocks.")

    monkeypatch.setattr(skeleton_module, "find_blocks", no_blocks)
    listed = r"top-level modules are: model: LlamaModel \(embed_tokens: Embedding, layers: ModuleList, norm: .*lm_head"
    with pytest.raises(ModelNotSupportedError, match=listed):
        stream(llama_folder, tmp_path / "out", "rtn")


def test_a_memory_budget_below_one_block_names_the_block_size(llama_folder, tmp_path):
    with pytest.raises(ConfigError, match=r"memory budget of 10.00 MB is smaller than one decoder block needs: "
                                          r"block \d \(model\.layers\.\d\) is 6\.\d+ MB in float32") as info:
        stream(llama_folder, tmp_path / "out", "rtn", memory_budget="10MB")
    assert "Allow at least" in str(info.value)
    assert not (tmp_path / "out.partial").exists()


def test_algorithms_that_cannot_stream_are_named(llama_folder, tmp_path):
    with pytest.raises(ConfigError, match=r"int8_dynamic cannot run on a model streamed block by block.*gptq"):
        smash_folder(llama_folder, SmashConfig(["int8_dynamic"]), tmp_path / "out", stream=True, verbose=False)
    with pytest.raises(ConfigError, match="dtype 'int4' is not supported"):
        stream(llama_folder, tmp_path / "out", "rtn", dtype="int4")


def test_a_folder_that_is_no_save_is_never_written_into(llama_folder, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not an earlier slimkit save"):
        stream(llama_folder, out, "rtn")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_a_full_disk_keeps_the_previous_output_and_the_same_call_resumes(byte_llama_folder, tmp_path, monkeypatch):
    out = tmp_path / "out"
    stream(byte_llama_folder, out, "rtn")
    previous = (out / "model.safetensors").read_bytes()
    original = slimkit_format.save_tensors_atomic

    def full(tensors, path, *args, **kwargs):
        if "block-00002" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(tensors, path, *args, **kwargs)

    monkeypatch.setattr(slimkit_format, "save_tensors_atomic", full)
    with pytest.raises(SaveLoadError, match=r"disk filled up.*previous output at .* is intact.*run the same command"):
        stream(byte_llama_folder, out, "hqq", overwrite=True)
    assert (out / "model.safetensors").read_bytes() == previous
    assert json.loads((out / "smash_config.json").read_text())["algorithms"] == {"quantizer": "rtn"}
    monkeypatch.setattr(slimkit_format, "save_tensors_atomic", original)
    result = stream(byte_llama_folder, out, "hqq", overwrite=True)
    assert result.resumed_at == 2
    assert json.loads((out / "smash_config.json").read_text())["algorithms"] == {"quantizer": "hqq"}


def test_a_full_disk_while_assembling_keeps_the_previous_output(byte_llama_folder, tmp_path, monkeypatch):
    out = tmp_path / "out"
    stream(byte_llama_folder, out, "rtn")
    previous = (out / "model.safetensors").read_bytes()

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(slimkit_format, "concat_safetensors", full)
    with pytest.raises(SaveLoadError, match="disk filled up"):
        stream(byte_llama_folder, out, "rtn", dtype="bfloat16", overwrite=True)
    assert (out / "model.safetensors").read_bytes() == previous


def test_the_memory_check_counts_one_hessian_per_layer_and_the_factor_copy_only_on_cuda(llama_folder):
    from slimkit.engine.prepare import prepare
    from slimkit.engine.stream.plan import _statistics_bytes, make_plan

    config = json.loads((llama_folder / "config.json").read_text())
    hidden, ffn = config["hidden_size"], config["intermediate_size"]
    per_layer = 4 * (6 * hidden**2 + ffn**2)  # q, k, v, o, gate, up read hidden-wide inputs; down ffn-wide ones
    plan = make_plan(prepare(llama_folder, make_config("gptq"), stream=True))
    assert plan.statistics_bytes == per_layer  # on the CPU the widest is factorised inside itself
    cuda = _statistics_bytes(plan.skeleton, plan.blocks, plan.targets, True, torch.device("cuda"))
    assert cuda == per_layer + 4 * ffn**2  # torch's factorisations hold a second copy
