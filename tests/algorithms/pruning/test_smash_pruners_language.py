"""Data-driven pruners on a causal language model: token batches (input_ids, next-token labels)."""

from __future__ import annotations

import pytest
import torch

from slimkit import SmashConfig, smash, zoo
from slimkit.data.utils import DictDataset
from slimkit.evaluation import count_parameters


def _token_collate(items: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.stack([torch.as_tensor(item["ids"]) for item in items])
    labels = ids[:, 1:].clone()
    labels[:, -2:] = -100  # ignored positions, as the text collate writes for padding
    return ids[:, :-1], labels


def _splits() -> tuple[DictDataset, DictDataset, DictDataset]:
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, 256, (13,), generator=gen) for _ in range(24)]
    return DictDataset({"ids": rows[:16]}), DictDataset({"ids": rows[16:20]}), DictDataset({"ids": rows[20:]})


@pytest.mark.parametrize("algo", ["taylor_fo_weight", "activation_apoz_rank"])
def test_token_batches_rank_the_mlp_channels(algo):
    model, inputs = zoo.load("tiny_llama")
    cfg = SmashConfig({algo: {"sparsity": 0.25, "batches": 2, "batch_size": 4, "dims": ["mlp"]}}, device="cpu")
    cfg.add_example_inputs(inputs)
    cfg.add_data(_splits(), collate_fn=_token_collate)
    smashed = smash(model, cfg, verbose=False)
    for layer in smashed.model.model.layers:
        assert layer.mlp.gate_proj.out_features == layer.mlp.up_proj.out_features == 96
        assert layer.mlp.down_proj.in_features == 96
    assert count_parameters(smashed.model) == count_parameters(model) - 2 * 32 * 3 * 64
    with torch.no_grad():
        assert smashed(**inputs).logits.shape == model(**inputs).logits.shape
