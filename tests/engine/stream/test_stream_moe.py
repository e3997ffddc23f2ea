"""Mixture-of-experts checkpoints stream too: experts stored one matrix each are read into the fused modules."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from slimkit import SmashConfig, SmashedModel, smash, smash_folder
from slimkit.errors import ModelNotSupportedError
from slimkit.formats import FormatError
from slimkit.formats.slimkit_writer import SlimkitWriter
from tests.engine.stream.conftest import VOCAB, crash_once_staged, make_config

_SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=VOCAB, num_experts_per_tok=2)
FAMILIES = {
    # stored as block_sparse_moe.experts.N.w1/w2/w3 (renamed to mlp, w1 and w3 fused into gate_up_proj)
    "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM,
                dict(num_local_experts=4, architectures=["MixtralForCausalLM"])),
    # stored as mlp.experts.N.gate_proj/up_proj/down_proj, beside a shared expert of plain Linear layers
    "qwen2_moe": (transformers.Qwen2MoeConfig, transformers.Qwen2MoeForCausalLM,
                  dict(num_experts=4, moe_intermediate_size=64, shared_expert_intermediate_size=128,
                       architectures=["Qwen2MoeForCausalLM"])),
}


def _folder(tmp_path, family):
    config_cls, model_cls, extra = FAMILIES[family]
    torch.manual_seed(0)
    model_cls(config_cls(**_SMALL, **extra)).save_pretrained(tmp_path / family)
    return tmp_path / family, model_cls


@pytest.mark.parametrize("algorithm", ["rtn", "gptq"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_streamed_moe_equals_the_in_memory_smash(tmp_path, family, algorithm):
    folder, model_cls = _folder(tmp_path, family)
    stored = load_file(str(folder / "model.safetensors"))
    assert any(".experts.3." in k for k in stored) and not any(k.endswith("gate_up_proj") for k in stored)
    with warnings.catch_warnings(record=True) as streamed_warnings:
        warnings.simplefilter("always")
        result = smash_folder(folder, make_config(algorithm, group_size=32), tmp_path / "streamed", stream=True,
                              progress=False, verbose=False)
    assert result.blocks == 2
    with warnings.catch_warnings(record=True) as memory_warnings:
        warnings.simplefilter("always")
        smashed = smash(model_cls.from_pretrained(folder, dtype=torch.float32).eval(),
                        make_config(algorithm, group_size=32), copy_model=False, verbose=False)
    fallback = [[str(w.message) for w in caught if "too few calibration tokens" in str(w.message)]
                for caught in (streamed_warnings, memory_warnings)]
    assert fallback[0] == fallback[1]  # experts short of routed tokens are named alike (RTN for them in both runs)
    smashed.save_pretrained(tmp_path / "memory")
    a, b = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("streamed", "memory"))
    assert a.keys() == b.keys() and [k for k in a if not torch.equal(a[k], b[k])] == []
    assert "model.layers.1.mlp.experts.gate_up_proj_qweight" in a  # the experts are packed, not left in float
    cards = [[line for line in (tmp_path / d / "README.md").read_text().splitlines() if "module(s)" in line]
             for d in ("streamed", "memory")]
    assert cards[0] == cards[1] == ["- 2 MoE experts module(s) of 4 experts: 4-bit, groups of 32, asymmetric"]
    reloaded = SmashedModel.from_pretrained(tmp_path / "streamed")
    ids = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, smashed(ids).logits)


def test_a_missing_expert_is_named(tmp_path):
    folder, _ = _folder(tmp_path, "mixtral")
    stored = load_file(str(folder / "model.safetensors"))
    del stored["model.layers.1.block_sparse_moe.experts.2.w3.weight"]
    save_file(stored, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelNotSupportedError, match=r"stored experts of model.layers.1.mlp.experts.gate_up_proj are "
                                                     r"incomplete.*\.experts\.\*\.w3\.weight"):
        smash_folder(folder, SmashConfig({"rtn": {"group_size": 32}}), tmp_path / "out", stream=True, progress=False,
                     verbose=False)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_a_stored_layout_streaming_cannot_replay_is_refused_by_name(tmp_path, monkeypatch):
    from transformers.core_model_loading import MergeModulelist, Transpose, WeightConverter

    folder, _ = _folder(tmp_path, "qwen2_moe")
    odd = WeightConverter("mlp.experts.*.down_proj.weight", "mlp.experts.down_proj",
                          operations=[MergeModulelist(dim=0), Transpose(dim0=1, dim1=2)])
    monkeypatch.setattr("slimkit.engine.stream.layout._conversions", lambda model: [odd])
    with pytest.raises(ModelNotSupportedError, match=r"mlp.experts.down_proj .*Transpose.*--no-stream"):
        smash_folder(folder, SmashConfig({"rtn": {"group_size": 32}}), tmp_path / "out", stream=True, progress=False,
                     verbose=False)


@pytest.mark.parametrize("stream", [True, False])
def test_checkpoint_formats_refuse_quantized_experts_and_take_them_in_float(tmp_path, stream):
    folder, _ = _folder(tmp_path, "mixtral")
    with pytest.raises(FormatError, match=r"mixture-of-experts modules \(model.layers.0.mlp.experts.*one packed "
                                          r"matrix per expert.*rtn_exclude"):
        smash_folder(folder, SmashConfig({"rtn": {"group_size": 32}}), tmp_path / "out", stream=stream,
                     save_format="compressed-tensors", progress=False, verbose=False)
    assert not (tmp_path / "out").exists()
    cfg = SmashConfig({"rtn": {"group_size": 32, "sym": True, "exclude": ["lm_head", "*.experts"]}})
    smash_folder(folder, cfg, tmp_path / "out", stream=stream, save_format="compressed-tensors", progress=False,
                 verbose=False)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out")  # transformers reads it
    ours = SmashedModel.from_pretrained(tmp_path / "out")
    ids = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids).logits, ours(ids).logits, rtol=0, atol=1e-5)


def test_a_crashed_moe_run_resumes_to_identical_files_and_card(tmp_path, monkeypatch):
    folder, _ = _folder(tmp_path, "mixtral")
    run = functools.partial(smash_folder, folder, SmashConfig({"rtn": {"group_size": 32}}), stream=True,
                            progress=False, verbose=False)
    run(tmp_path / "whole")
    crash_once_staged(monkeypatch, SlimkitWriter)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "out")
    assert run(tmp_path / "out").resumed_at == 1  # block 0's experts were packed by the first process
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == (tmp_path / "whole" / "model.safetensors"
                                                                     ).read_bytes()
    card = (tmp_path / "out" / "README.md").read_text()
    assert "- 2 MoE experts module(s) of 4 experts: 4-bit, groups of 32, asymmetric" in card
