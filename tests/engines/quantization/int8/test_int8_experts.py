"""Int8Experts: int8 per-expert weights with fbgemm matmuls, saturation-safe recipe, exact state-dict round trip."""

from __future__ import annotations

import copy

import pytest
import torch

from slimkit.core.experts import reference_forward
from slimkit.core.tensors import flatten_state_dict, load_flat_state_dict
from slimkit.engines.quantization.experts import DOWN, FIRST
from slimkit.engines.quantization.int8 import linear as int8_linear
from slimkit.engines.quantization.int8.experts import Int8Experts, quantize_experts_int8, replay_int8_experts
from slimkit.engines.quantization.int8.linear import PAIR_LIMIT
from slimkit.errors import ConfigError
from tests.engines.quantization.tiny_moe import experts_of, tiny_moe


def _routing(tokens: int = 7, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(tokens, 64, generator=gen), torch.randint(0, 4, (tokens, 2), generator=gen),
            torch.rand(tokens, 2, generator=gen))


def _dequantized_reference(module: Int8Experts, x, index, weights):
    first = torch.stack([module.dequantize(FIRST, e) for e in range(module.num_experts)])
    down = torch.stack([module.dequantize(DOWN, e) for e in range(module.num_experts)])
    return reference_forward(module.layout, first, down, module.act_fn, x, index, weights)


@pytest.mark.parametrize("safe", [True, False])
def test_int8_experts_compute_the_int8_weights_and_keep_the_contract(safe, monkeypatch):
    exact = safe or int8_linear.full_range_is_exact()  # what this CPU's kernel really computes exactly
    if not safe:  # as on a VNNI CPU, where 8-bit activations times 127-level weights are exact
        monkeypatch.setattr(int8_linear, "full_range_is_exact", lambda: True)
    model = tiny_moe("mixtral")
    name, original = next(iter(experts_of(model).items()))
    x, index, weights = _routing()
    with torch.no_grad():
        before = original(x, index, weights)
    specs = quantize_experts_int8(model, [name], saturation_safe=safe)
    module = model.get_submodule(name)
    assert isinstance(module, Int8Experts) and specs[name]["saturation_safe"] is safe
    assert not list(module.parameters()) and not list(module.buffers())
    with torch.no_grad():
        after = module(x, index, weights)
    reference = _dequantized_reference(module, x, index, weights)
    if exact:  # only the per-call 8-bit activation rounding separates fbgemm from the dequantized weights
        assert float((after - reference).abs().max()) < 0.02 * float(reference.abs().max())
        assert torch.nn.functional.cosine_similarity(after.flatten(), before.flatten(), dim=0) > 0.999
    for which in (FIRST, DOWN):
        codes = torch.stack([module.qweight(which, e).int_repr() for e in range(4)]).int().abs()
        pair = (codes[..., 0::2] + codes[..., 1::2]).amax()
        assert (int(pair) <= PAIR_LIMIT) if safe else int(codes.amax()) == 127


def test_state_dict_round_trip_is_exact_and_deepcopy_works():
    model = tiny_moe("qwen2_moe")
    names = list(experts_of(model))
    specs = quantize_experts_int8(model, names, saturation_safe=True)
    state = flatten_state_dict(model)
    key = f"{names[0]}.gate_up_proj_int8"
    assert state[key].dtype == torch.int8 and tuple(state[key].shape) == (4, 96, 64)
    assert state[f"{names[0]}.down_proj_scale"].dtype == torch.float64
    fresh = tiny_moe("qwen2_moe", seed=5)
    replay_int8_experts(fresh, specs)
    with pytest.raises(ConfigError, match="has no weights yet; load a state dict or quantize"):
        fresh.get_submodule(names[0]).qweight(FIRST, 0)
    load_flat_state_dict(fresh, state)
    ids = torch.randint(0, 256, (2, 10))
    with torch.no_grad():
        expected = model(ids).logits
        assert torch.equal(fresh(ids).logits, expected)
        assert torch.equal(copy.deepcopy(model)(ids).logits, expected)


def test_a_full_range_save_is_requantized_pair_safe_where_the_cpu_saturates(monkeypatch):
    model = tiny_moe("mixtral")
    names = list(experts_of(model))
    with monkeypatch.context() as vnni:  # saved on a CPU whose int8 kernel is exact
        vnni.setattr(int8_linear, "full_range_is_exact", lambda: True)
        specs = quantize_experts_int8(model, names, saturation_safe=False)
    assert specs[names[0]]["saturation_safe"] is False
    state = flatten_state_dict(model)
    monkeypatch.setenv("SLIMKIT_INT8_SATURATION_SAFE", "1")  # as on an AVX2 CPU
    fresh = tiny_moe("mixtral", seed=3)
    replay_int8_experts(fresh, specs)
    load_flat_state_dict(fresh, state)
    module = fresh.get_submodule(names[0])
    assert module.saturation_safe and not module.requantize_on_load
    codes = module.qweight(FIRST, 0).int_repr().int().abs()
    assert int((codes[:, 0::2] + codes[:, 1::2]).amax()) <= PAIR_LIMIT


def test_call_macs_is_int8():
    model = tiny_moe("olmoe")
    name = next(iter(experts_of(model)))
    quantize_experts_int8(model, [name])
    x, index, weights = _routing(3)
    assert model.get_submodule(name).call_macs((x, index, weights), None) == ("int8", 6 * (96 * 64 + 64 * 48))


def test_per_token_scales_keep_small_tokens_routed_with_an_outlier():
    model = tiny_moe("mixtral")
    name, original = next(iter(experts_of(model).items()))
    x, index, weights = _routing(8)
    x[0] *= 300.0  # one outlier token: with one scale per call the others' codes collapse
    with torch.no_grad():
        exact = original(x, index, weights)
    errors = {}
    for per_token in (False, True):
        quantized = tiny_moe("mixtral")
        specs = quantize_experts_int8(quantized, [name], saturation_safe=True, per_token=per_token)
        assert specs[name]["per_token"] is per_token
        module = quantized.get_submodule(name)
        with torch.no_grad():
            errors[per_token] = float((module(x, index, weights) - exact)[1:].norm() / exact[1:].norm())
        assert f"activation_scales={'per_token' if per_token else 'per_call'}" in repr(module)
        fresh = tiny_moe("mixtral", seed=4)  # the spec replays the scales; the weights load exactly
        replay_int8_experts(fresh, specs)
        load_flat_state_dict(fresh, flatten_state_dict(quantized))
        with torch.no_grad():
            assert torch.equal(fresh.get_submodule(name)(x, index, weights), module(x, index, weights))
    assert errors[True] < 0.05 < errors[False]
