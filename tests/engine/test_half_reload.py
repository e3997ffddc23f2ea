"""bf16 / fp16 Hugging Face models reload bit-exactly: the rebuilt model keeps the buffers' own dtypes."""

from __future__ import annotations

import pytest
import torch
import transformers

from slimkit import SmashConfig, SmashedModel, smash
from slimkit.zoo.sources import load_source


def _folder(tmp_path, dtype):
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=256, architectures=["LlamaForCausalLM"])
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).to(dtype).save_pretrained(tmp_path / "model")
    return tmp_path / "model"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_folder_smashed_with_rtn_reloads_identically(tmp_path, dtype):
    model = load_source(_folder(tmp_path, dtype)).model  # as `slimkit smash --model <folder>` loads it
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32  # transformers keeps it float32
    smashed = smash(model, SmashConfig({"rtn": {"group_size": 32}}), verbose=False)
    smashed.save_pretrained(tmp_path / "out")
    again = SmashedModel.from_pretrained(tmp_path / "out")
    assert again.model.model.rotary_emb.inv_freq.dtype == torch.float32
    assert again.model.model.norm.weight.dtype == dtype
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(again(ids).logits, smashed(ids).logits)


def test_a_model_cast_after_loading_keeps_its_cast_buffers_on_reload(tmp_path):
    model = load_source(_folder(tmp_path, torch.float32)).model.to(torch.bfloat16)
    assert model.model.rotary_emb.inv_freq.dtype == torch.bfloat16
    smashed = smash(model, SmashConfig({"rtn": {"group_size": 32}}), verbose=False)
    smashed.save_pretrained(tmp_path / "out")
    again = SmashedModel.from_pretrained(tmp_path / "out")
    assert again.model.model.rotary_emb.inv_freq.dtype == torch.bfloat16
    ids = torch.randint(0, 256, (1, 12))
    with torch.no_grad():
        assert torch.equal(again(ids).logits, smashed(ids).logits)
