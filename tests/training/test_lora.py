"""LoRA adapters: only adapters train, the merged model computes what the adapted one did, and it is plain."""

from __future__ import annotations

import copy

import pytest
import torch

from slimkit.errors import ConfigError
from slimkit.training import fit
from slimkit.training.lora import add_lora, is_lora, lora_targets, merge_lora
from tests.training.conftest import make_mlp


def test_targets_default_to_every_linear_and_globs_select(digits):
    model = make_mlp()
    assert lora_targets(model) == ["1", "4"]
    assert lora_targets(model, ["4"]) == ["4"]


def test_bad_targets_name_the_real_layers():
    with pytest.raises(ConfigError, match=r"\['fc9'\] name no layer.*Linear layers: 1, 4"):
        lora_targets(make_mlp(), ["fc9"])
    with pytest.raises(ConfigError, match="Linear layers only.*'2'"):
        lora_targets(make_mlp(), ["2"])  # the ReLU
    with pytest.raises(ConfigError, match="rank must be an integer >= 1, got 0"):
        add_lora(make_mlp(), 0)


def test_only_adapters_train_and_the_merge_equals_the_adapted_model(few_batches):
    model = make_mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = few_batches[0][0]
    with torch.no_grad():
        dense_out = model(x)
    adapted = add_lora(model, rank=4, alpha=8)
    with torch.no_grad():
        assert torch.equal(adapted(x), dense_out)  # B starts at zero: the adapters change nothing yet
    trainable = [n for n, p in adapted.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert sum(p.numel() for p in adapted.parameters() if p.requires_grad) == 4 * (64 + 32) + 4 * (32 + 10)
    fit(adapted, few_batches, epochs=3, optimizer=torch.optim.Adam(
        [p for p in adapted.parameters() if p.requires_grad], lr=1e-2), progress=False)
    base_now = {n.removeprefix("model.").replace(".base_layer", ""): p
                for n, p in adapted.named_parameters() if "lora_" not in n}
    for name, value in before.items():  # the frozen base weights did not move
        assert torch.equal(base_now[name], value), name
    adapted.eval()
    with torch.no_grad():
        adapted_out = adapted(x)
    assert not torch.allclose(adapted_out, dense_out)  # the adapters learned something
    merged = merge_lora(adapted)
    assert not is_lora(merged) and type(merged) is torch.nn.Sequential
    assert set(merged.state_dict()) == set(before)  # plain names: the save format of the model itself
    assert all(p.requires_grad for p in merged.parameters())
    with torch.no_grad():
        torch.testing.assert_close(merged(x), adapted_out, rtol=1e-5, atol=1e-5)
    assert not torch.equal(merged.state_dict()["1.weight"], before["1.weight"])  # B A folded into the weight


def test_merge_needs_the_wrapper():
    with pytest.raises(ConfigError, match="needs the wrapper add_lora returned"):
        merge_lora(copy.deepcopy(make_mlp()))
