"""The NNI face with dims: dependency-aware filter pruners cut mlp / heads / hidden, masks the speedup removes."""

from __future__ import annotations

import pytest
import torch

from slimkit.engines.pruning import ChannelEnergyPruner, L1FilterPruner, PruningConfigError, load_masks
from slimkit.engines.pruning.dims import parse_dims
from slimkit.engines.pruning.experts import RoutedEnergy
from slimkit.engines.speedup import ModelSpeedup
from tests.algorithms.pruning.families import build


def _speedup(model, inputs, masks):
    speedup = ModelSpeedup(model, inputs, masks)
    speedup.speedup_model()
    return speedup


def test_dims_validation_names_what_is_allowed():
    assert parse_dims(None) == {"mlp": None, "heads": None, "hidden": None}
    assert parse_dims({"hidden": 0.25}) == {"hidden": 0.25}
    with pytest.raises(PruningConfigError, match=r"names 'width', which is not a dimension.*mlp, heads, hidden"):
        parse_dims(["mlp", "width"])
    with pytest.raises(PruningConfigError, match=r"dims\['mlp'\] must be a ratio in \[0, 1\)"):
        parse_dims({"mlp": 1.5})
    model, inputs = build("bert")
    with pytest.raises(PruningConfigError, match="dims needs dependency_aware=True"):
        L1FilterPruner(model, [{"sparsity": 0.5}], dims=["mlp"])


def test_hidden_masks_the_embeddings_and_the_speedup_removes_the_stream(tmp_path):
    model, inputs = build("bert")
    pruner = L1FilterPruner(model, [{"sparsity": 0.5, "op_types": ["Linear"]}, {"exclude": True,
                                                                              "op_names": ["classifier"]}],
                            dependency_aware=True, dummy_input=inputs, dims={"hidden": 0.25})
    pruner.compress()
    masks = pruner.get_masks()
    word = masks["bert.embeddings.word_embeddings"]["weight_mask"]
    kept_columns = word.any(0).nonzero().flatten().tolist()
    assert len(kept_columns) == 48 and masks["bert.embeddings.position_embeddings"]["weight_mask"].any(0).tolist() \
        == word.any(0).tolist()
    ffn = masks["bert.encoder.layer.0.intermediate.dense"]["weight_mask"]
    assert bool(ffn.all())  # 'mlp' was not asked for
    pruner.export_model(tmp_path / "m.safetensors", tmp_path / "masks.safetensors")
    again = load_masks(tmp_path / "masks.safetensors")
    assert torch.equal(again["bert.embeddings.word_embeddings"]["weight_mask"], word)
    small = pruner.unwrap_model(apply_masks=True)
    speedup = _speedup(small, inputs, masks)
    assert small.bert.embeddings.word_embeddings.weight.shape == (100, 48)
    assert small.bert.encoder.layer[1].output.LayerNorm.weight.shape == (48,)
    assert speedup.kept_channels["bert.encoder.layer.0.attention.self.query"]["in"] == kept_columns
    assert small.bert.encoder.layer[0].intermediate.dense.weight.shape == (128, 48)


def test_heads_only_keeps_whole_kv_groups_of_a_fused_projection():
    model, inputs = build("phi3")
    pruner = L1FilterPruner(model, [{"sparsity": 0.5, "op_types": ["Linear"]}, {"exclude": True,
                                                                              "op_names": ["lm_head"]}],
                            dependency_aware=True, dummy_input=inputs, dims=["heads"])
    pruner.compress()
    masks = pruner.get_masks()
    rows = masks["model.layers.0.self_attn.qkv_proj"]["weight_mask"].any(1)
    q, k, v = rows[:64].reshape(4, 16).all(1), rows[64:96].reshape(2, 16).all(1), rows[96:].reshape(2, 16).all(1)
    assert k.tolist() == v.tolist() and k.sum() == 1  # one kv head of two, with its two query heads
    assert q.tolist() == k.repeat_interleave(2).tolist()
    small = pruner.unwrap_model(apply_masks=True)
    with torch.no_grad():
        masked = small(**inputs).logits
    _speedup(small, inputs, masks)
    att = small.model.layers[0].self_attn
    assert att.qkv_proj.weight.shape == (64, 64) and att.o_proj.weight.shape == (64, 32)
    assert att.config.num_attention_heads == 2 and small.config.num_attention_heads == 4  # its own config
    with torch.no_grad():  # heads only: the shrunk model computes what the masked one did
        torch.testing.assert_close(small(**inputs).logits, masked, atol=1e-5, rtol=1e-5)


def _token_batches(n: int = 3) -> list[tuple[dict, torch.Tensor]]:
    gen = torch.Generator().manual_seed(2)
    out = []
    for _ in range(n):
        ids = torch.randint(0, 100, (2, 8), generator=gen)
        out.append(({"input_ids": ids}, ids))
    return out


def test_moe_experts_rank_their_channels_on_the_tokens_routed_to_them():
    model, inputs = build("mixtral")
    batches = _token_batches()
    experts = {n: m for n, m in model.named_modules() if n.endswith("mlp.experts")}
    with RoutedEnergy(experts) as reference, torch.no_grad():  # the same statistics, gathered independently
        for x, _ in batches:
            model(**x)
    pruner = ChannelEnergyPruner(model, [{"sparsity": 0.5, "op_types": ["Linear"]}, {"exclude": True,
                                                                                   "op_names": ["lm_head"]}],
                                 dataloader=batches, statistics_batch_num=3, dependency_aware=True, dims=["mlp"])
    pruner.compress()
    masks = pruner.get_masks()
    name = "model.layers.0.mlp.experts"
    energy = reference.importance(name)
    kept = masks[name]["inner_channels"]
    assert kept.shape == (4, 64)
    for e in range(4):
        assert kept[e].tolist() == sorted(energy[e].argsort()[64:].tolist())
    small = pruner.unwrap_model(apply_masks=True)
    _speedup(small, inputs, masks)
    moe = small.model.layers[0].mlp
    assert moe.experts.gate_up_proj.shape == (4, 128, 64) and moe.gate.weight.shape == (4, 64)


def test_channel_energy_ranks_heads_by_what_they_deliver_to_the_output_projection():
    model, _ = build("phi3")
    batches = _token_batches()
    seen: dict[int, list[torch.Tensor]] = {0: [], 1: []}
    handles = [model.model.layers[i].self_attn.o_proj.register_forward_pre_hook(
        lambda mod, args, i=i: seen[i].append(args[0].detach().reshape(-1, 64))) for i in seen]
    with torch.no_grad():
        for x, _ in batches:
            model(**x)
    for handle in handles:
        handle.remove()
    strongest = {}
    for i, parts in seen.items():  # energy per context channel, summed per kv group (2 query heads x 16)
        weight = model.model.layers[i].self_attn.o_proj.weight.detach().double()
        energy = torch.cat(parts).double().pow(2).mean(0) * weight.pow(2).sum(0)
        strongest[i] = int(energy.reshape(2, 32).sum(1).argmax())
    pruner = ChannelEnergyPruner(model, [{"sparsity": 0.5, "op_types": ["Linear"]}, {"exclude": True,
                                                                                   "op_names": ["lm_head"]}],
                                 dataloader=batches, statistics_batch_num=3, dependency_aware=True, dims=["heads"])
    pruner.compress()
    for i in seen:
        rows = pruner.get_masks()[f"model.layers.{i}.self_attn.qkv_proj"]["weight_mask"].any(1)
        assert rows[64:96].reshape(2, 16).all(1).tolist() == [g == strongest[i] for g in range(2)]
