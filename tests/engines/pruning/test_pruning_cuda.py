"""The same pruners on a CUDA device (skipped without one): masks live and are computed on the GPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.engines.pruning import (
    ActivationAPoZRankFilterPruner,
    AGPEngine,
    AttentionHeadPruner,
    ChannelEnergyPruner,
    FPGMEngine,
    L1FilterPruner,
    LevelEngine,
    SlimEngine,
    TaylorFOWeightFilterPruner,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("pruner_cls", [L1FilterPruner, FPGMEngine, LevelEngine, SlimEngine])
def test_weight_pruners_on_cuda(convnet, digits, pruner_cls):
    model = convnet.cuda()
    x = digits[0][:8].cuda()
    pruner = pruner_cls(model, [{"sparsity": 0.5}])
    pruner.compress()
    masks = pruner.get_masks()
    assert all(m["weight_mask"].is_cuda for m in masks.values())
    assert sum(int((m["weight_mask"] == 0).sum()) for m in masks.values()) > 0
    assert model(x).shape == (8, 10)
    # the same pruning on CPU gives the same masks
    cpu = pruner.unwrap_model().cpu()
    again = pruner_cls(cpu, [{"sparsity": 0.5}])
    again.compress()
    for name, m in again.get_masks().items():
        assert torch.equal(m["weight_mask"], masks[name]["weight_mask"].cpu())


def test_data_pruners_on_cuda(convnet, digit_batches):
    model = convnet.cuda()
    batches = [(x.cuda(), y.cuda()) for x, y in digit_batches]
    taylor = TaylorFOWeightFilterPruner(model, [{"sparsity": 0.5}], criterion=nn.functional.cross_entropy,
                                        dataloader=batches, statistics_batch_num=2)
    taylor.compress()
    assert int((taylor.get_masks()["conv2"]["weight_mask"].reshape(16, -1).sum(1) == 0).sum()) == 8
    taylor.unwrap_model()
    apoz = ActivationAPoZRankFilterPruner(model, [{"sparsity": 0.5}], dataloader=batches)
    apoz.compress()
    assert int((apoz.get_masks()["conv1"]["weight_mask"].reshape(8, -1).sum(1) == 0).sum()) == 4


def test_channel_energy_on_cuda_matches_cpu(convnet, digit_batches):
    import copy

    cpu_model = copy.deepcopy(convnet)
    model = convnet.cuda()
    batches = [(x.cuda(), y.cuda()) for x, y in digit_batches]
    pruner = ChannelEnergyPruner(model, [{"sparsity": 0.5}], dataloader=batches, statistics_batch_num=2)
    pruner.compress()
    masks = pruner.get_masks()
    assert all(m["weight_mask"].is_cuda for m in masks.values())
    again = ChannelEnergyPruner(cpu_model, [{"sparsity": 0.5}], dataloader=digit_batches, statistics_batch_num=2)
    again.compress()
    for name, m in again.get_masks().items():  # same half pruned, up to a near-tie flipped by GPU rounding
        cpu_keep = m["weight_mask"].flatten(1)[:, 0]
        gpu_keep = masks[name]["weight_mask"].cpu().flatten(1)[:, 0]
        assert int(cpu_keep.sum()) == int(gpu_keep.sum()) == len(cpu_keep) // 2, name
        assert int((cpu_keep != gpu_keep).sum()) <= 2, name


def test_agp_training_on_cuda(mlp, digit_batches):
    model = mlp.cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    pruner = AGPEngine(model, [{"sparsity": 0.8, "op_names": ["fc1"]}], optimizer, num_iterations=2)
    pruner.compress()
    for x, y in digit_batches:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
        optimizer.step()
    mask = pruner.get_masks()["fc1"]["weight_mask"]
    assert int((mask == 0).sum()) == int(0.8 * 2048)
    assert torch.count_nonzero(model.fc1.module.weight[mask == 0]) == 0


def test_attention_heads_on_cuda_bf16(tiny_llama):
    model = tiny_llama.to("cuda", torch.bfloat16)
    pruner = AttentionHeadPruner(model, [{"sparsity": 0.5}])
    pruner.compress()
    assert [len(v) for v in pruner.get_pruned_kv_heads().values()] == [1, 1]
    assert pruner.get_masks()["model.layers.0.self_attn.q_proj"]["weight_mask"].dtype == torch.bfloat16
    logits = model(torch.randint(0, 256, (1, 8), device="cuda")).logits
    assert torch.isfinite(logits.float()).all()
