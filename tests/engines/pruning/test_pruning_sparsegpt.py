"""SparseGPT and Wanda engines: reconstruction error on real calibration inputs, the OBS mask, sparse + 4-bit."""

from __future__ import annotations

import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.algorithms.pruning._calibrated import parse_mask_structure
from slimkit.data.builtin import pydoc_text_blocks
from slimkit.engines.pruning.sparsegpt import check_pattern, lowest_mask, nm_mask, sparsegpt_prune
from slimkit.engines.pruning.wanda import InputNorms, wanda_mask
from slimkit.engines.quantization.lowbit.gptq import HessianAccumulator, inverse_hessian_factor
from slimkit.engines.quantization.lowbit.rtn import fake_quantize
from slimkit.errors import ConfigError
from tests.algorithms.testers.lowbit import ByteTokenizer

PATTERNS = [(0, 0), (2, 4), (4, 8)]


def _layer_inputs(model: torch.nn.Module, ids: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
    """Each layer's inputs ``[tokens, in]`` on ``ids`` (the dense model: what one layer's problem sees)."""
    seen: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    handles = [model.get_submodule(n).register_forward_pre_hook(
        lambda _m, args, n=n: seen[n].append(args[0].detach().reshape(-1, args[0].shape[-1]))) for n in names]
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()
    return {n: torch.cat(v) for n, v in seen.items()}


def _errors(w: torch.Tensor, x: torch.Tensor, pattern: tuple[int, int]) -> dict[str, float]:
    """``||W X - W' X||`` of SparseGPT, Wanda and magnitude pruning at 50 % (or N:M) on inputs ``x``."""
    n, m = pattern
    acc = HessianAccumulator(x.shape[1])
    acc.add(x)
    sparse = sparsegpt_prune(w, inverse_hessian_factor(acc.h), 0.5, n, m, block_size=32)
    masks = {"sparsegpt": sparse.mask, "wanda": wanda_mask(w, x.norm(dim=0), 0.5, n, m),
             "magnitude": wanda_mask(w, None, 0.5, n, m)}
    pruned = {"sparsegpt": sparse.weight, "wanda": w.masked_fill(masks["wanda"], 0.0),
              "magnitude": w.masked_fill(masks["magnitude"], 0.0)}
    for name, mask in masks.items():
        assert float(mask.float().mean()) == 0.5 and bool((pruned[name][mask] == 0).all()), name
    return {name: float(((w - p) @ x.t()).norm()) for name, p in pruned.items()}


@pytest.fixture(scope="module")
def tiny_inputs():
    model = zoo.load("tiny_llama").model.eval()
    ids = pydoc_text_blocks(ByteTokenizer(), 4, 64, split="calibration")
    names = ["model.layers.1.self_attn.q_proj", "model.layers.1.mlp.down_proj"]
    return model, _layer_inputs(model, ids, names)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_sparsegpt_reconstructs_better_than_wanda_and_magnitude(tiny_inputs, pattern):
    model, inputs = tiny_inputs
    for name, x in inputs.items():
        err = _errors(model.get_submodule(name).weight.detach().float(), x, pattern)
        assert err["sparsegpt"] < min(err["wanda"], err["magnitude"]), (name, err)


@pytest.mark.slow
@pytest.mark.parametrize("pattern", [(0, 0), (2, 4)])
def test_sparsegpt_reconstructs_better_on_smollm2(pattern):
    """The same inequality on a real pretrained model's layer inputs (SmolLM2-135M, PyDocText calibration text)."""
    loaded = zoo.load("smollm2-135m")
    ids = pydoc_text_blocks(loaded.tokenizer, 4, 128, split="calibration")
    names = ["model.layers.6.self_attn.q_proj", "model.layers.6.mlp.gate_proj"]
    for name, x in _layer_inputs(loaded.model.eval(), ids, names).items():
        err = _errors(loaded.model.get_submodule(name).weight.detach().float(), x, pattern)
        assert err["sparsegpt"] < err["wanda"] < err["magnitude"], (name, err)


def _problem(out_f: int = 24, in_f: int = 64, tokens: int = 400) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, in_f, generator=g) @ torch.randn(in_f, in_f, generator=g) * 0.2
    x = x * torch.linspace(0.1, 3.0, in_f)  # channels of very different scale, as in real activations
    w = torch.randn(out_f, in_f, generator=g)
    acc = HessianAccumulator(in_f)
    acc.add(x)
    return w, x, inverse_hessian_factor(acc.h)


@pytest.mark.parametrize("block_size", [64, 16])
def test_mask_without_error_spreading_is_the_obs_top_k(block_size):
    w, _, u = _problem()
    score = w.square() / torch.diagonal(u).square()
    result = sparsegpt_prune(w, u, 0.5, block_size=block_size, spread=False)
    expected = torch.cat([lowest_mask(score[:, s : s + block_size], 0.5) for s in range(0, 64, block_size)], dim=1)
    assert torch.equal(result.mask, expected)
    assert torch.equal(result.weight, w.masked_fill(expected, 0.0))  # nothing else changed
    nm = sparsegpt_prune(w, u, prune_n=2, prune_m=4, block_size=block_size, spread=False)
    assert torch.equal(nm.mask, nm_mask(score, 2, 4))
    spread = sparsegpt_prune(w, u, 0.5, block_size=block_size)
    # one block: its mask is chosen before any error is spread; several: spreading changes the later blocks' choices
    assert torch.equal(spread.mask, expected) == (block_size == 64)


def test_sparse_plus_4bit_in_one_sweep():
    w, x, u = _problem()
    result = sparsegpt_prune(w, u, prune_n=2, prune_m=4, block_size=32, bits=4, group_size=16)
    z = result.zeros.repeat_interleave(16, dim=1)
    deq = (result.codes.float() - z) * result.scales.repeat_interleave(16, dim=1)
    assert bool((deq[result.mask] == 0).all()) and bool((result.codes.float()[result.mask] == z[result.mask]).all())
    assert torch.equal(result.mask.reshape(24, -1, 4).sum(-1), torch.full((24, 16), 2))
    # one sweep beats pruning first and then rounding the kept weights (RTN keeps the zeros: code z is exactly 0)
    pruned = sparsegpt_prune(w, u, prune_n=2, prune_m=4, block_size=32).weight
    two_steps = fake_quantize(pruned, 4, 16)
    assert bool((two_steps[pruned == 0] == 0).all())
    assert float(((w - deq) @ x.t()).norm()) < float(((w - two_steps) @ x.t()).norm())


def test_wanda_norms_and_magnitude_baseline():
    w, x, _ = _problem()
    norms = InputNorms(64)
    for part in x.split(100):
        norms.add(part.reshape(2, 50, 64))
    torch.testing.assert_close(norms.norms(), x.norm(dim=0))
    mask = wanda_mask(w, norms.norms(), 0.25)
    assert torch.equal(mask.sum(dim=1), torch.full((24,), 16))  # per output row
    assert torch.equal(mask, lowest_mask_rows(w.abs() * x.norm(dim=0), 16))
    assert torch.equal(wanda_mask(w, None, 0.25), lowest_mask_rows(w.abs(), 16))


def lowest_mask_rows(score: torch.Tensor, k: int) -> torch.Tensor:
    return score <= score.sort(dim=1).values[:, k - 1 : k]


def test_bad_patterns_are_refused():
    with pytest.raises(ConfigError, match="0 < N < M"):
        check_pattern(0.5, 4, 4)
    with pytest.raises(ConfigError, match="divisible by 8"):
        check_pattern(0.5, 4, 8, in_features=60)
    with pytest.raises(ConfigError, match="multiple of M=8"):
        check_pattern(0.5, 4, 8, in_features=64, block_size=12)
    with pytest.raises(ConfigError, match=r"sparsity must be in \[0, 1\)"):
        check_pattern(1.0, 0, 0)
    assert parse_mask_structure("2:4", 0.5) == (2, 4) and parse_mask_structure("0:0", 0.7) == (0, 0)
    with pytest.raises(ConfigError, match="set sparsity=0.5 or mask_structure='0:0'"):
        parse_mask_structure("2:4", 0.7)


def _config(algorithm: str, **hps) -> SmashConfig:
    cfg = SmashConfig()
    cfg.add_tokenizer(ByteTokenizer())
    cfg.add_data("PyDocText")
    cfg.activate(algorithm)
    for key, value in {"n_calibration_samples": 2, "seq_len": 32, **hps}.items():
        cfg[f"{algorithm}_{key}"] = value
    return cfg


def test_smash_refuses_a_contradicting_pattern():
    model = zoo.load("tiny_llama").model
    with pytest.raises(ConfigError, match="mask_structure='2:4' removes 2 of every 4"):
        smash(model, _config("wanda", sparsity=0.7, mask_structure="2:4"), verbose=False)


@pytest.mark.parametrize("algorithm", ["sparsegpt", "wanda"])
def test_sparse_weights_reload_exactly_from_safetensors(algorithm, tmp_path):
    loaded = zoo.load("tiny_llama")
    smashed = smash(loaded.model, _config(algorithm, mask_structure="2:4"), verbose=False)
    smashed.save_pretrained(tmp_path / "out")
    assert any(p.suffix == ".safetensors" for p in (tmp_path / "out").iterdir())
    again = SmashedModel.from_pretrained(tmp_path / "out", model=lambda: zoo.build("tiny_llama"))
    before, after = smashed.model.state_dict(), again.model.state_dict()
    assert before.keys() == after.keys()
    for key, value in before.items():
        assert torch.equal(value, after[key]), key
    down = after["model.layers.0.mlp.down_proj.weight"]
    assert bool(((down == 0).reshape(down.shape[0], -1, 4).sum(-1) == 2).all())
