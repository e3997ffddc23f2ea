"""Reloading a save whose base slimkit rebuilds (zoo / Hugging Face) builds the base on the meta device.

The low-bit (and other verified) replays then run on that skeleton and the saved tensors are assigned into it,
so no fp32 weights are ever initialised. These tests check the skeleton really is weightless, the bytes written
while building it, tied weights, the meta-leftover check, and that unverified algorithms keep the full build.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from safetensors.torch import load_file
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.core import registry
from slimkit.core.tensors import flatten_state_dict, load_flat_state_dict
from slimkit.engine import base_model, serialization
from slimkit.engine.base_model import meta_parameters, meta_tensors, rebuild_base
from slimkit.engines.quantization.lowbit import PackedLinear
from slimkit.errors import SaveLoadError
from tests.algorithms.testers.lowbit import ByteTokenizer
from tests.engine.fakes import make, registered

LOWBIT = {"bits": 4, "group_size": 32}


class WrittenBytes(TorchDispatchMode):
    """Bytes of real (non-meta) tensor storage that any op writes: ``torch.empty`` alone is not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.storages: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.__name__.startswith(("empty", "new_empty")):
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and not t.is_meta and t.numel():
                    storage = t.untyped_storage()
                    self.storages[storage.data_ptr()] = max(self.storages.get(storage.data_ptr(), 0), storage.nbytes())
        return out

    @property
    def total(self) -> int:
        return sum(self.storages.values())


@pytest.fixture
def spy(monkeypatch):
    """Record, for every weight load, whether it assigned and the skeleton's state just before the load."""
    calls: list[dict] = []
    original = serialization._load_weights

    def load(model, file, assign=False):
        calls.append({"assign": assign, "meta": meta_tensors(model), "model": model,
                      "packed": {n: m for n, m in model.named_modules() if isinstance(m, PackedLinear)}})
        return original(model, file, assign)

    monkeypatch.setattr(serialization, "_load_weights", load)
    return calls


def _logits(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).logits


def _save_reload(base, cfg, tmp_path, **load_kwargs):
    smashed = smash(base, cfg, verbose=False)
    smashed.save_pretrained(tmp_path / "saved")
    return smashed, SmashedModel.from_pretrained(tmp_path / "saved", **load_kwargs)


def _gptq_config() -> SmashConfig:
    cfg = SmashConfig({"gptq": {**LOWBIT, "n_calibration_samples": 4, "seq_len": 32}}, device="cpu")
    cfg.add_tokenizer(ByteTokenizer())
    cfg.add_data("PyDocText")
    return cfg


@pytest.mark.parametrize("make_config", [lambda: SmashConfig({"rtn": LOWBIT}, device="cpu"), _gptq_config],
                         ids=["rtn", "gptq"])
def test_lowbit_reload_uses_a_weightless_skeleton_and_is_exact(make_config, spy, tmp_path):
    model, inputs = zoo.load("tiny_llama")
    smashed, again = _save_reload(model, make_config(), tmp_path)
    (call,) = spy
    assert call["assign"] is True
    # before the load: every parameter left outside the packed layers is on meta; packed buffers are real CPU
    norms = [f"model.layers.{i}.{n}.weight" for i in range(2) for n in ("input_layernorm", "post_attention_layernorm")]
    assert sorted(call["meta"]) == sorted(["lm_head.weight", "model.embed_tokens.weight", "model.norm.weight", *norms])
    assert len(call["packed"]) == 14
    for layer in call["packed"].values():
        assert all(b.device.type == "cpu" for b in layer.buffers())
    rotary = call["model"].model.rotary_emb.inv_freq  # non-persistent buffer: computed, not loaded
    assert rotary.device.type == "cpu" and torch.equal(rotary, model.model.rotary_emb.inv_freq)
    # after the load: nothing on meta, outputs bit-identical to the model that was saved
    assert meta_tensors(again.model) == []
    assert torch.equal(_logits(again, inputs), _logits(smashed, inputs))


def test_skeleton_writes_a_fraction_of_the_fp32_bytes(spy, monkeypatch, tmp_path):
    """Bytes written while building base + replay (until the weights load): meta build vs the full fp32 build."""
    model, _ = zoo.load("tiny_llama")
    fp32_bytes = sum(p.numel() * 4 for p in model.parameters())
    smash(model, SmashConfig({"rtn": LOWBIT}, device="cpu"), verbose=False).save_pretrained(tmp_path / "s")

    def skeleton_bytes() -> tuple[int, bool]:
        spy.clear()
        with WrittenBytes() as counter:
            original = serialization._load_weights
            seen = {}

            def stop(model, file, assign=False):
                seen["bytes"] = counter.total
                return original(model, file, assign)

            monkeypatch.setattr(serialization, "_load_weights", stop)
            SmashedModel.from_pretrained(tmp_path / "s")
            monkeypatch.setattr(serialization, "_load_weights", original)
        return seen["bytes"], spy[0]["assign"]

    meta_bytes, assigned = skeleton_bytes()
    assert assigned
    monkeypatch.setattr(registry.get("rtn"), "replay_on_meta", False)
    full_bytes, assigned = skeleton_bytes()
    assert not assigned
    assert full_bytes >= fp32_bytes  # the full build initialises every fp32 weight
    assert meta_bytes < 0.2 * fp32_bytes, (meta_bytes, fp32_bytes)  # packed zeros + fp16 scales + inv_freq


def test_tied_embeddings_are_tied_again_after_an_assign_load(spy, tmp_path):
    model, inputs = zoo.load("tiny_gpt2")  # GPT-2 ties lm_head.weight to transformer.wte.weight
    smashed, again = _save_reload(model, SmashConfig({"rtn": LOWBIT}, device="cpu"), tmp_path)
    assert spy[0]["assign"] is True and "transformer.wte.weight" in spy[0]["meta"]
    saved = load_file(str(tmp_path / "saved" / "model.safetensors"))
    assert "lm_head.weight" not in saved and "lm_head.weight.__alias__" in saved  # stored once
    assert again.model.lm_head.weight is again.model.transformer.wte.weight
    assert torch.equal(_logits(again, inputs), _logits(smashed, inputs))


def test_tied_hf_llama_rebuilt_from_its_config(spy, tmp_path):
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=1, vocab_size=96,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = {"input_ids": torch.randint(0, 96, (2, 12))}
    smashed, again = _save_reload(model, SmashConfig({"rtn": LOWBIT}, device="cpu"), tmp_path)
    assert spy[0]["assign"] is True and "model.embed_tokens.weight" in spy[0]["meta"]
    assert again.model.lm_head.weight is again.model.model.embed_tokens.weight
    assert torch.equal(_logits(again, ids), _logits(smashed, ids))


def test_model_argument_keeps_the_full_build(spy, tmp_path):
    model, inputs = zoo.load("tiny_llama")
    smashed, again = _save_reload(model, SmashConfig({"rtn": LOWBIT}, device="cpu"), tmp_path,
                                  model=lambda: zoo.build("tiny_llama"))
    assert spy[0]["assign"] is False and spy[0]["meta"] == []
    assert torch.equal(_logits(again, inputs), _logits(smashed, inputs))


def test_int8_dynamic_replay_reads_weights_so_it_keeps_the_full_build(spy, tmp_path):
    assert registry.get("int8_dynamic").replay_on_meta is False
    model, inputs = zoo.load("tiny_llama")
    smashed, again = _save_reload(model, SmashConfig(["int8_dynamic"], device="cpu"), tmp_path)
    assert spy[0]["assign"] is False and spy[0]["meta"] == []
    assert torch.equal(_logits(again, inputs), _logits(smashed, inputs))


def _recording(name: str, group: str, seen: list, **attrs):
    """A fake algorithm that records, whenever it runs on reload, whether it saw meta parameters."""

    def _run(self, model, *args):
        seen.append((name, any(p.is_meta for p in model.parameters())))
        return model

    return make(name, group, _apply=_run, replay=_run, **attrs)


def test_algorithms_around_a_lowbit_one_see_real_weights(spy, tmp_path):
    """A REPLAY pruner not verified on meta forces the full build; REAPPLY and SAVE_BEFORE_APPLY run after the
    load, so they see the real weights even when the base was a meta skeleton."""
    from slimkit.core.contract import SaveFn

    seen: list = []
    pruner = _recording("fake_replayer", "pruner", seen, save_fn=SaveFn.REPLAY)
    cacher = _recording("fake_cacher", "cacher", seen)  # REAPPLY
    compiler = _recording("fake_compiler", "compiler", seen)  # SAVE_BEFORE_APPLY
    model, inputs = zoo.load("tiny_llama")
    with registered(pruner, cacher, compiler):
        cfg = SmashConfig({"fake_replayer": {}, "rtn": LOWBIT}, device="cpu")
        smashed, again = _save_reload(model, cfg, tmp_path / "a")
        assert spy[-1]["assign"] is False and seen[-1] == ("fake_replayer", False)
        assert torch.equal(_logits(again, inputs), _logits(smashed, inputs))
        seen.clear()
        cfg = SmashConfig({"rtn": LOWBIT, "fake_cacher": {}, "fake_compiler": {}}, device="cpu")
        smashed, again = _save_reload(zoo.load("tiny_llama").model, cfg, tmp_path / "b")
        assert spy[-1]["assign"] is True
        assert seen[-2:] == [("fake_cacher", False), ("fake_compiler", False)]
        assert torch.equal(_logits(again, inputs), _logits(smashed, inputs))


def test_a_tensor_left_on_meta_after_the_load_raises(monkeypatch, tmp_path):
    """A non-persistent buffer computed from a parameter at init is meta in a skeleton and never loaded."""
    model, _ = zoo.load("mlp")
    smash(model, SmashConfig({"rtn": LOWBIT}, device="cpu"), verbose=False).save_pretrained(tmp_path / "s")
    real_build = zoo.build

    def build(name, **kwargs):
        built = real_build(name, **kwargs)
        built.register_buffer("doubled", built.fc1.weight.detach() * 2, persistent=False)
        return built

    monkeypatch.setattr(zoo, "build", build)
    with pytest.raises(SaveLoadError, match=r"still on the meta device\): doubled\. .*model=<a fresh instance"):
        SmashedModel.from_pretrained(tmp_path / "s")
    again = SmashedModel.from_pretrained(tmp_path / "s", model=lambda: build("mlp"))  # the advertised way out
    assert meta_tensors(again.model) == []


def test_meta_parameters_keeps_buffers_real_and_restores_the_patch():
    with meta_parameters():
        layer = nn.Linear(4, 3)
        layer.register_buffer("steps", torch.arange(5.0))
    assert layer.weight.is_meta and layer.bias.is_meta and isinstance(layer.weight, nn.Parameter)
    assert layer.weight.requires_grad and torch.equal(layer.steps, torch.arange(5.0))
    with pytest.raises(RuntimeError, match="boom"), meta_parameters():
        raise RuntimeError("boom")
    assert not nn.Linear(2, 2).weight.is_meta  # patch undone, even after an error


def test_a_base_whose_init_needs_real_weights_is_built_in_full(monkeypatch):
    def build(name, **kwargs):
        layer = nn.Linear(3, 3)
        layer.weight.data = torch.eye(3)  # impossible on a meta parameter
        return layer

    monkeypatch.setattr(zoo, "build", build)
    built = rebuild_base({"kind": "zoo", "name": "mlp", "dtype": "float32"}, on_meta=True)
    assert torch.equal(built.weight, torch.eye(3))
    with pytest.raises(SaveLoadError, match="built by your own code"):
        rebuild_base({"kind": "user", "class": "x.Y"}, on_meta=True)
    assert base_model.REBUILT_KINDS == ("zoo", "hf")


def test_assign_load_casts_to_the_model_dtype_and_reties_only_shared_tensors():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4, bias=False)
            self.b = nn.Linear(4, 4, bias=False)
            self.b.weight = self.a.weight

    torch.manual_seed(0)
    source = Tied()
    flat = flatten_state_dict(source)
    assert set(flat) == {"a.weight", "b.weight.__alias__"}
    with meta_parameters():
        target = Tied().half()
    load_flat_state_dict(target, flat, assign=True)
    assert target.b.weight is target.a.weight and target.a.weight.dtype == torch.float16
    assert torch.equal(target.a.weight, source.a.weight.half())
    # saved untied (two different tensors): each keeps its own values
    untied = {"a.weight": torch.ones(4, 4), "b.weight": torch.zeros(4, 4)}
    with meta_parameters():
        target = Tied()
    load_flat_state_dict(target, untied, assign=True)
    assert target.b.weight is not target.a.weight and target.b.weight.sum() == 0 and target.a.weight.sum() == 16
