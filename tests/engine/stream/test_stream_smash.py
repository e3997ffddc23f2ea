"""Streaming smash: a model folder quantized block by block equals the same model quantized in memory."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file

from slimkit import SmashedModel, smash, smash_folder
from slimkit.engine.stream.checkpoint import Checkpoint
from tests.engine.stream.conftest import VOCAB, make_config
from tests.engine.stream.conftest import stream as _stream


def _in_memory(folder, out, algorithm, dtype=torch.float32):
    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=dtype).eval()
    smashed = smash(model, make_config(algorithm), copy_model=False, verbose=False)
    smashed.save_pretrained(out)
    return smashed


def _assert_same_weights(a_dir, b_dir, cast=False):
    a, b = load_file(str(a_dir / "model.safetensors")), load_file(str(b_dir / "model.safetensors"))
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k].to(a[k].dtype) if cast else b[k])]
    assert differ == []
    return a


def _card_layers(folder):
    """The model card's lines on quantized and float layers (the rest holds dates and timings)."""
    text = (folder / "README.md").read_text()
    return [line for line in text.splitlines() if "layer(s):" in line or line.startswith("- kept in float")]


def test_the_fixture_is_a_20m_llama_in_three_shards(llama_folder):
    ckpt = Checkpoint(llama_folder)
    assert len(ckpt.files) == 3 and (llama_folder / "model.safetensors.index.json").is_file()
    assert 18e6 < sum(t.numel for t in ckpt.tensors.values()) < 21e6
    assert ckpt.dtype() == torch.float32


@pytest.mark.parametrize("algorithm", ["rtn", pytest.param("gptq", marks=pytest.mark.slow),
                                       pytest.param("awq", marks=pytest.mark.slow)])
def test_streaming_writes_what_the_in_memory_smash_saves(llama_folder, tmp_path, algorithm, request):
    if algorithm == "gptq":
        streamed = request.getfixturevalue("gptq_streamed")
    else:
        streamed = tmp_path / "streamed"
        result = _stream(llama_folder, streamed, algorithm)
        assert result.blocks == 8 and result.format == "slimkit" and result.resumed_at == 0
        assert not (tmp_path / "streamed.partial").exists()  # the staging folder is gone once published
    smashed = _in_memory(llama_folder, tmp_path / "memory", algorithm)
    flat = _assert_same_weights(streamed, tmp_path / "memory")
    assert flat["model.layers.3.mlp.down_proj.qweight"].dtype == torch.uint8
    streamed_cfg = json.loads((streamed / "smash_config.json").read_text())
    memory_cfg = json.loads((tmp_path / "memory" / "smash_config.json").read_text())
    assert streamed_cfg["applied"][0]["state"] == memory_cfg["applied"][0]["state"]
    assert len(streamed_cfg["applied"][0]["state"]["layers"]) == 8 * 7  # lm_head excluded by default
    assert streamed_cfg["base"] == memory_cfg["base"]
    reloaded = SmashedModel.from_pretrained(streamed)
    ids = torch.randint(0, VOCAB, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, smashed(ids).logits)


@pytest.mark.slow  # two GPTQ runs of the 20M-parameter Llama (the small model's equality runs by default)
def test_calibration_inputs_spilled_to_disk_give_the_same_result(llama_folder, gptq_streamed, tmp_path):
    item = 64 * 384 * 4  # one calibration sample's hidden state: seq_len x hidden x float32
    result = _stream(llama_folder, tmp_path / "spilled", "gptq", activation_budget=item)
    assert result.inputs_ram_bytes == item and result.inputs_disk_bytes == 3 * item
    _assert_same_weights(tmp_path / "spilled", gptq_streamed)


def test_a_quantized_lm_head_is_rounded_to_nearest_outside_the_blocks(llama_folder, tmp_path):
    cfg = make_config("rtn", exclude=[])
    smash_folder(llama_folder, cfg, tmp_path / "out", stream=True, progress=False, verbose=False)
    state = json.loads((tmp_path / "out" / "smash_config.json").read_text())["applied"][0]["state"]["layers"]
    assert "lm_head" in state and len(state) == 8 * 7 + 1
    model = SmashedModel.from_pretrained(tmp_path / "out")
    assert type(model.model.lm_head).__name__ == "PackedLinear"


@pytest.mark.slow  # GPTQ twice on the 20M-parameter Llama; tests/engine/test_half_reload.py covers bf16 quickly
def test_bf16_checkpoint_is_quantized_from_its_values_and_saved_in_bf16(llama_bf16_folder, tmp_path):
    _stream(llama_bf16_folder, tmp_path / "streamed", "gptq")
    _in_memory(llama_bf16_folder, tmp_path / "fp32", "gptq", dtype=torch.float32)  # same values, fp32 arithmetic
    flat = _assert_same_weights(tmp_path / "streamed", tmp_path / "fp32", cast=True)
    assert flat["model.norm.weight"].dtype == torch.bfloat16
    assert flat["model.embed_tokens.weight"].dtype == torch.bfloat16
    assert flat["model.layers.0.self_attn.q_proj.scales"].dtype == torch.float16  # scales keep their own dtype
    saved = json.loads((tmp_path / "streamed" / "smash_config.json").read_text())
    assert saved["base"]["dtype"] == "bfloat16"
    assert saved["base"]["buffer_dtypes"]["model.rotary_emb.inv_freq"] == "float32"
    reloaded = SmashedModel.from_pretrained(tmp_path / "streamed").model
    assert reloaded.model.norm.weight.dtype == torch.bfloat16
    assert reloaded.model.rotary_emb.inv_freq.dtype == torch.float32
    state = reloaded.state_dict()
    assert all(torch.equal(state[k], v) for k, v in flat.items() if k in state)  # bit-exact reload
    with torch.no_grad():
        out = reloaded(torch.randint(0, VOCAB, (1, 12))).logits
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


def test_explicit_dtype_rounds_the_weights_first(llama_folder, tmp_path):
    smash_folder(llama_folder, make_config("rtn"), tmp_path / "out", stream=True, dtype="bf16", progress=False,
                 verbose=False)
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as handle:
        assert handle.get_tensor("model.norm.weight").dtype == torch.bfloat16
        assert handle.get_tensor("lm_head.weight").dtype == torch.bfloat16
    assert json.loads((tmp_path / "out" / "smash_config.json").read_text())["base"]["dtype"] == "bfloat16"


def test_a_finished_output_is_not_redone_and_another_config_is_refused(byte_llama_folder, tmp_path):
    out = tmp_path / "out"
    _stream(byte_llama_folder, out, "rtn")
    before = (out / "model.safetensors").stat().st_mtime_ns
    again = _stream(byte_llama_folder, out, "rtn")
    assert again.resumed_at == 3 and (out / "model.safetensors").stat().st_mtime_ns == before
    with pytest.raises(Exception, match="already holds a saved model of another model or configuration"):
        smash_folder(byte_llama_folder, make_config("rtn", bits=3), out, stream=True, progress=False, verbose=False)
    smash_folder(byte_llama_folder, make_config("rtn", bits=3), out, stream=True, progress=False, verbose=False,
                 overwrite=True)
    assert json.loads((out / "smash_config.json").read_text())["hyperparameters"]["rtn_bits"] == 3


@pytest.mark.parametrize("algorithm", ["gptq", "awq"])
def test_calibrated_streaming_of_a_small_llama_equals_the_in_memory_smash(byte_llama_folder, tmp_path, algorithm):
    """GPTQ / AWQ block by block from the shards give the in-memory result (the 20M-parameter run is `slow`)."""
    _stream(byte_llama_folder, tmp_path / "streamed", algorithm)
    smashed = _in_memory(byte_llama_folder, tmp_path / "memory", algorithm)
    _assert_same_weights(tmp_path / "streamed", tmp_path / "memory")
    streamed_cfg = json.loads((tmp_path / "streamed" / "smash_config.json").read_text())
    memory_cfg = json.loads((tmp_path / "memory" / "smash_config.json").read_text())
    assert streamed_cfg["applied"][0]["state"] == memory_cfg["applied"][0]["state"]  # specs and coverage
    assert streamed_cfg["applied"][0]["state"]["coverage"]["quantized_layers"] == 3 * 7
    card = _card_layers(tmp_path / "streamed")
    assert card == _card_layers(tmp_path / "memory")  # the streamed save has the in-memory save's model card
    assert card[-1] == "- kept in float: lm_head" and sum(int(line[2:].split(" ")[0]) for line in card[:-1]) == 21
    reloaded = SmashedModel.from_pretrained(tmp_path / "streamed")
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, smashed(ids).logits)
