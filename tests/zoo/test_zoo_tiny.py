from __future__ import annotations

import pytest
import torch

from slimkit import zoo
from slimkit.errors import ConfigError
from slimkit.utils import main_tensor, run_model

TINY = {
    # name: expected main output shape with default kwargs
    "mlp": (4, 10),
    "resnet_tiny": (2, 10),
    "tiny_llama": (2, 16, 256),
    "tiny_gpt2": (2, 16, 256),
    "tiny_bert": (2, 2),
    "tiny_vit": (2, 10),
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_load_runs_forward(name):
    zm = zoo.load(name)
    with torch.no_grad():
        out = main_tensor(run_model(zm.model, zm.example_inputs))
    assert tuple(out.shape) == TINY[name]
    assert torch.isfinite(out).all()
    assert zm.task


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_build_equals_load(name):
    loaded = zoo.load(name).model.state_dict()
    built = zoo.build(name).state_dict()
    assert list(built) == list(loaded)
    for key, value in loaded.items():
        assert torch.equal(built[key], value), key


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_seed_changes_weights_and_inputs(name):
    a, b = zoo.load(name, seed=0), zoo.load(name, seed=1)
    wa = next(a.model.parameters())
    wb = next(b.model.parameters())
    assert wa.shape == wb.shape and not torch.equal(wa, wb)
    assert b.model.slimkit_zoo_kwargs["seed"] == 1


def test_tiny_llama_uses_grouped_query_attention():
    model = zoo.load("tiny_llama").model
    attn = model.model.layers[0].self_attn
    assert attn.q_proj.weight.shape == (64, 64)  # 4 heads x 16
    assert attn.k_proj.weight.shape == (32, 64)  # 2 kv heads x 16
    assert model.config.num_key_value_heads == 2 and len(model.model.layers) == 2


def test_tiny_llama_kwargs_reshape_and_rebuild():
    zm = zoo.load("tiny_llama", hidden_size=32, num_hidden_layers=1, seq_len=8, batch_size=3)
    assert zm.example_inputs["input_ids"].shape == (3, 8)
    rebuilt = zoo.build("tiny_llama", **zm.model.slimkit_zoo_kwargs)
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {
        k: v.shape for k, v in zm.model.state_dict().items()
    }
    assert len(rebuilt.model.layers) == 1


def test_tiny_llama_rejects_bad_head_split():
    with pytest.raises(ConfigError, match="num_attention_heads=4 is not a multiple of num_key_value_heads=3"):
        zoo.build("tiny_llama", num_key_value_heads=3)
    with pytest.raises(ConfigError, match="seq_len=200 exceeds max_position_embeddings=128"):
        zoo.load("tiny_llama", seq_len=200)


def test_tiny_vit_rejects_bad_patch():
    with pytest.raises(ConfigError, match="image_size=32 is not a multiple of patch_size=5"):
        zoo.build("tiny_vit", patch_size=5)


def test_resnet_tiny_has_downsample_shortcut_and_bn():
    model = zoo.load("resnet_tiny").model
    assert model.layer1[0].downsample is None
    down = model.layer2[0].downsample
    assert isinstance(down[0], torch.nn.Conv2d) and down[0].stride == (2, 2)
    assert isinstance(down[1], torch.nn.BatchNorm2d)
    out = model(torch.randn(1, 3, 48, 48))  # global pooling: any image size works
    assert out.shape == (1, 10)


def test_tiny_bert_mask_matters():
    zm = zoo.load("tiny_bert")
    inputs = zm.example_inputs
    assert inputs["attention_mask"][-1].sum() == 8 and inputs["attention_mask"][0].sum() == 16
    with torch.no_grad():
        masked = zm.model(**inputs).logits
        unmasked = zm.model(input_ids=inputs["input_ids"]).logits
    assert torch.allclose(masked[0], unmasked[0], atol=1e-6)
    assert not torch.allclose(masked[-1], unmasked[-1], atol=1e-6)
