"""prepare(): each decision of a smash made once, on a copy of the user's config, before anything is written."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from slimkit import SmashConfig, smash, smash_folder
from slimkit.cli import main
from slimkit.engine import prepare as preparation
from slimkit.engine.prepare import in_memory_bytes, prepare
from slimkit.engine.smash import smash_prepared
from slimkit.engine.stream import memory
from slimkit.engine.stream.checkpoint import Checkpoint
from slimkit.engine.stream.plan import make_plan
from slimkit.errors import ConfigError, ModelNotSupportedError
from slimkit.formats import FormatError, export_format
from tests.engine.stream.conftest import write_folder

RTN = {"rtn": {"bits": 4, "group_size": 32}}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A 2-block Llama (fp32, 2 shards) with the zoo's byte tokenizer beside it."""
    from slimkit.zoo._hf import byte_tokenizer

    path = write_folder(tmp_path_factory.mktemp("prepare") / "model", shards=2, vocab_size=256, hidden_size=64,
                        intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    byte_tokenizer().save_pretrained(path)
    return path


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def state(cfg: SmashConfig) -> tuple:
    """Everything a smash could change on the user's config."""
    return (json.dumps(cfg.to_dict(), sort_keys=True), cfg.device, cfg.device_auto, cfg.tokenizer, cfg.data,
            cfg.example_inputs)


def stored_bytes(path) -> int:
    """The weights' bytes, read with safetensors itself (not with the Checkpoint under test)."""
    total = 0
    for file in path.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            total += sum(f.get_tensor(k).numel() * f.get_tensor(k).element_size() for k in f.keys())
    return total


def test_device_auto_is_resolved_once_and_the_save_says_the_device_that_ran(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine; int8_dynamic runs on CPUs only
    cfg = SmashConfig({"int8_dynamic": {}})
    assert (cfg.device, cfg.device_auto) == ("cuda", True)
    prepared = prepare(mlp(), cfg)
    assert prepared.device == prepared.config.device == "cpu" and prepared.bound
    smashed = smash(mlp(), cfg, verbose=False)
    assert smashed.smash_config.device == "cpu"
    assert (cfg.device, cfg.device_auto) == ("cuda", True)  # the user's config still says 'auto'
    smashed.save_pretrained(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "smash_config.json").read_text())["device"] == "cpu"


def test_the_streaming_plan_computes_on_the_device_the_saved_config_records(folder, tmp_path):
    prepared = prepare(folder, SmashConfig(RTN, device="cpu"), stream=True)
    plan = make_plan(prepared)
    assert plan.device == torch.device(prepared.device) and plan.config.device == "cpu"
    smash_folder(folder, SmashConfig(RTN, device="cpu"), tmp_path / "out", stream=True, progress=False,
                 verbose=False)
    assert json.loads((tmp_path / "out" / "smash_config.json").read_text())["device"] == "cpu"


def test_a_folder_streams_only_over_the_memory_budget(folder, monkeypatch):
    need = in_memory_bytes(Checkpoint(folder))
    assert need == int(1.5 * stored_bytes(folder))  # fp32 weights, 1.5x for the in-memory working copies
    over = prepare(folder, SmashConfig(RTN), memory_budget=need - 1)
    assert over.stream and "streaming it block by block (--no-stream to load it whole)" in over.reason
    assert over.dtype == torch.float32 and over.checkpoint is not None
    under = prepare(folder, SmashConfig(RTN), memory_budget=need)
    assert not under.stream and under.reason.endswith("loading it whole")
    monkeypatch.setattr(memory, "available_bytes", lambda: 2 * need + 2)  # no budget: half of what is available
    assert not prepare(folder, SmashConfig(RTN)).stream
    monkeypatch.setattr(memory, "available_bytes", lambda: 2 * need - 2)
    assert prepare(folder, SmashConfig(RTN)).stream
    assert prepare(folder, SmashConfig(RTN), stream=False).stream is False  # asked: no size decision


@pytest.mark.parametrize(("recipe", "refused"), [
    (["int8_dynamic"], "int8_dynamic cannot run on a model streamed block by block"),
    (["level", "rtn"], "level cannot run on a model streamed block by block"),
])
def test_recipes_that_cannot_stream_load_whole_or_are_refused_when_streaming_is_asked(folder, recipe, refused):
    prepared = prepare(folder, SmashConfig(recipe), memory_budget=1)  # far over the budget, yet it cannot stream
    assert not prepared.stream and prepared.reason == f"loading {folder} whole: {refused}"
    with pytest.raises(ConfigError, match=refused + r".*Streaming runs the block-wise quantizers \(.*rtn"):
        prepare(folder, SmashConfig(recipe), stream=True)


def test_the_tokenizer_is_found_once_and_saved(folder, tmp_path, monkeypatch, capsys):
    calls = []
    original = SmashConfig.add_tokenizer

    def spy(self, tokenizer):
        calls.append(tokenizer)
        original(self, tokenizer)

    monkeypatch.setattr(SmashConfig, "add_tokenizer", spy)
    for stream in (True, False):
        cfg = SmashConfig(RTN)
        smash_folder(folder, cfg, tmp_path / f"out{stream}", stream=stream, progress=False, verbose=False)
        assert len(calls) == 1 and str(folder) in str(calls[0]) and cfg.tokenizer is None  # a path or what it loaded
        assert (tmp_path / f"out{stream}" / "tokenizer" / "tokenizer.json").is_file()
        calls.clear()
    for stream in ("--stream", "--no-stream"):  # the command line: the folder's (streamed) or the zoo model's
        assert main(["smash", "--model", str(folder), "--algorithm", "rtn", "--set", "rtn_group_size=32", stream,
                     "--repeats", "1", "--warmup", "0", "--output", str(tmp_path / stream)]) == 0
        found = [c for c in calls if str(tmp_path / stream) not in str(c)]  # not the reload of the save
        assert len(found) == 1 and str(folder) in str(found[0]), calls
        calls.clear()
    capsys.readouterr()


def test_the_recipe_is_checked_once_per_run(folder, tmp_path, monkeypatch, capsys):
    counts = {"prepare": 0, "recipe": 0, "model": 0}
    fmt = type(export_format("compressed-tensors"))
    real_prepare, real_recipe, real_model = preparation.prepare, fmt.check_recipe, fmt.check_model_recipe

    def counting(key, real):
        def call(*args, **kwargs):
            counts[key] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(preparation, "prepare", counting("prepare", real_prepare))
    monkeypatch.setattr("slimkit.demo.prepare", preparation.prepare)
    monkeypatch.setattr(fmt, "check_recipe", counting("recipe", real_recipe))
    monkeypatch.setattr(fmt, "check_model_recipe", counting("model", real_model))
    argv = ["smash", "--model", str(folder), "--algorithm", "rtn", "--set", "rtn_group_size=32", "--stream",
            "--format", "compressed-tensors", "--output", str(tmp_path / "cli")]
    assert main(argv) == 0, capsys.readouterr().err
    assert counts == {"prepare": 1, "recipe": 1, "model": 1}
    for stream in (True, False):
        counts.update(prepare=0, recipe=0, model=0)
        smash_folder(folder, SmashConfig(RTN), tmp_path / f"api{stream}", stream=stream, progress=False,
                     verbose=False, save_format="compressed-tensors")
        assert counts == {"prepare": 1, "recipe": 1, "model": 1}, stream


def test_the_users_config_is_never_changed(folder, tmp_path, monkeypatch):
    cfg = SmashConfig(RTN)
    before = state(cfg)
    smash_folder(folder, cfg, tmp_path / "streamed", stream=True, progress=False, verbose=False)
    smash_folder(folder, cfg, tmp_path / "whole", stream=False, progress=False, verbose=False)
    assert state(cfg) == before
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    on_gpu = SmashConfig(["level", "int8_dynamic"])
    before = state(on_gpu)
    assert smash(mlp(), on_gpu, verbose=False).smash_config.device == "cpu"
    assert state(on_gpu) == before
    assert prepare(mlp(), on_gpu).config is not on_gpu


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(("fmt", "recipe", "error", "message"), [
    ("onnx", RTN, FormatError, "save_pretrained does not write 'onnx'"),
    ("safetensors", RTN, FormatError, "Unknown checkpoint format 'safetensors'"),
    ("gptq", {"hqq": {"bits": 3, "group_size": 32}}, FormatError, "Cannot save this recipe as gptq"),
])
def test_bad_input_is_refused_before_anything_is_written(folder, tmp_path, stream, fmt, recipe, error, message):
    with pytest.raises(error, match=message):
        smash_folder(folder, SmashConfig(recipe), tmp_path / "out", stream=stream, save_format=fmt, progress=False,
                     verbose=False)
    assert list(tmp_path.iterdir()) == []


def test_what_prepare_refuses_by_itself(folder):
    with pytest.raises(ModelNotSupportedError, match="needs a torch.nn.Module, got function"):
        prepare(lambda x: x, SmashConfig(RTN))
    with pytest.raises(ConfigError, match="needs a SmashConfig, got dict"):
        prepare(mlp(), {"quantizer": "rtn"})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="Streaming needs a Hugging Face model folder"):
        prepare(mlp(), SmashConfig(RTN), stream=True)
    with pytest.raises(ConfigError, match="dtype 'int4' is not supported"):
        prepare(folder, SmashConfig(RTN), dtype="int4")
    with pytest.raises(ConfigError, match="needs the Prepared of a folder that streams"):
        make_plan(prepare(folder, SmashConfig(RTN), stream=False))
    with pytest.raises(ConfigError, match="needs a Prepared bound to the model"):
        smash_prepared(mlp(), prepare(None, SmashConfig(["level"])))
