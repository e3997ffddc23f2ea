"""ChannelEnergyPruner: channels ranked by the energy they deliver to the layers that read them."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from slimkit.data import pydoc_text_blocks
from slimkit.engines.pruning import (
    ChannelCoupling,
    ChannelEnergyPruner,
    L1FilterPruner,
    PruningConfigError,
)
from slimkit.zoo import load

GATE_UP = [f"model.layers.{i}.mlp.{p}_proj" for i in range(2) for p in ("gate", "up")]


@pytest.fixture(scope="module")
def text_batches() -> list[torch.Tensor]:
    """Real text (Python's docs) as byte ids for the 256-token tiny Llama: 4 batches of 4 x 64."""
    ids = pydoc_text_blocks(load("tiny_llama").tokenizer, 16, 64, split="calibration")
    return list(ids.split(4))


def _down_inputs(model, batches) -> dict[int, torch.Tensor]:
    """The inputs of every down_proj (act(gate) * up), rows = tokens."""
    seen: dict[int, list[torch.Tensor]] = {0: [], 1: []}
    hooks = [model.model.layers[i].mlp.down_proj.register_forward_pre_hook(
        lambda m, a, i=i: seen[i].append(a[0].detach().reshape(-1, a[0].shape[-1]))) for i in range(2)]
    with torch.no_grad():
        for ids in batches:
            model(ids)
    for h in hooks:
        h.remove()
    return {i: torch.cat(v) for i, v in seen.items()}


def test_gated_mlp_channels_are_read_by_down_proj(tiny_llama, text_batches):
    coupling = ChannelCoupling(tiny_llama, text_batches[0])
    for proj in ("gate", "up"):
        (reader, module, channels, positions), = coupling.consumers(f"model.layers.0.mlp.{proj}_proj")
        assert reader == "model.layers.0.mlp.down_proj" and module is tiny_llama.model.layers[0].mlp.down_proj
        assert np.array_equal(channels, np.arange(128)) and np.array_equal(positions, np.arange(128))
    # the residual stream (o_proj rows) is read by the next blocks' q/k/v/gate/up and the head, after the norms
    readers = {r for r, *_ in coupling.consumers("model.layers.0.self_attn.o_proj")}
    assert {"model.layers.1.self_attn.q_proj", "model.layers.1.mlp.up_proj", "lm_head"} <= readers
    assert coupling.consumers("not.a.layer") == []


def test_llama_mlp_keeps_the_channels_that_feed_down_proj_most(tiny_llama, text_batches):
    reference = copy.deepcopy(tiny_llama)
    pruner = ChannelEnergyPruner(tiny_llama, [{"sparsity": 0.5, "op_names": GATE_UP}], dataloader=text_batches,
                                 statistics_batch_num=4, dependency_aware=True)
    pruner.compress()
    masks = pruner.get_masks()
    inputs = _down_inputs(reference, text_batches)
    for i in range(2):
        down = reference.model.layers[i].mlp.down_proj.weight
        energy = inputs[i].pow(2).mean(0) * down.pow(2).sum(0)  # E[h_j^2] * ||W_down[:, j]||^2
        expected = torch.ones(128)
        expected[energy.argsort()[:64]] = 0
        for proj in ("gate", "up"):  # one decision for the coupled pair, the lowest-energy half gone
            kept = masks[f"model.layers.{i}.mlp.{proj}_proj"]["weight_mask"][:, 0]
            assert torch.equal(kept, expected), (i, proj)
    assert {len(g.layers) for g in pruner.groups} == {2} and all(g.pruned == 64 for g in pruner.groups)


def _logit_error(model, reference, batches) -> float:
    with torch.no_grad():
        return sum(float((model(b).logits - reference(b).logits).pow(2).mean()) for b in batches)


def test_energy_pruned_llama_stays_closer_to_dense_than_l1(tiny_llama, text_batches):
    reference = copy.deepcopy(tiny_llama)
    errors = {}
    for name, cls, kwargs in (("energy", ChannelEnergyPruner, {"dataloader": text_batches,
                                                               "statistics_batch_num": 4}),
                              ("l1", L1FilterPruner, {})):
        model = copy.deepcopy(reference)
        pruner = cls(model, [{"sparsity": 0.5, "op_names": GATE_UP}], dependency_aware=True,
                     dummy_input=text_batches[0], **kwargs)
        pruner.compress()
        pruner.unwrap_model(apply_masks=True)
        errors[name] = _logit_error(model, reference, text_batches)
    assert errors["energy"] < 0.8 * errors["l1"], errors


def test_conv_channels_are_scored_at_the_next_conv_input(convnet, digit_batches):
    reference = copy.deepcopy(convnet)
    pruner = ChannelEnergyPruner(convnet, [{"sparsity": 0.5, "op_names": ["conv1"]}], dataloader=digit_batches,
                                 statistics_batch_num=2)
    pruner.compress()
    with torch.no_grad():  # conv2 reads relu(bn1(conv1(x))): second moment per channel x squared conv2 weights
        x = torch.cat([torch.relu(reference.bn1(reference.conv1(b))) for b, _ in digit_batches[:2]])
    energy = x.pow(2).mean(dim=(0, 2, 3)) * reference.conv2.weight.pow(2).sum(dim=(0, 2, 3))
    kept = pruner.get_masks()["conv1"]["weight_mask"].flatten(1)[:, 0]
    assert torch.equal(kept.nonzero().flatten(), energy.argsort()[4:].sort().values)


def test_channels_nothing_reads_fall_back_to_their_own_output(mlp, digit_batches):
    batches = [(x.flatten(1), y) for x, y in digit_batches]
    reference = copy.deepcopy(mlp)
    pruner = ChannelEnergyPruner(mlp, [{"sparsity": 0.3, "op_names": ["head"]}], dataloader=batches,
                                 statistics_batch_num=4)
    assert pruner.readers["head"] == []  # its rows are the model output
    pruner.compress()
    with torch.no_grad():
        out = torch.cat([reference(x) for x, _ in batches])
    kept = pruner.get_masks()["head"]["weight_mask"][:, 0]
    assert torch.equal(kept.nonzero().flatten(), out.pow(2).mean(0).argsort()[3:].sort().values)


def test_needs_data_or_an_input_to_trace(mlp):
    with pytest.raises(PruningConfigError, match="dataloader=.*dummy_input="):
        ChannelEnergyPruner(mlp, [{"sparsity": 0.5, "op_types": ["Linear"]}])
    with pytest.raises(PruningConfigError, match="dependency_aware must be True or False"):
        ChannelEnergyPruner(mlp, [{"sparsity": 0.5}], dummy_input=torch.zeros(1, 64), dependency_aware="yes")
