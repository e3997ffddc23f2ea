import pytest
import torch
import torch.nn.functional as F

from slimkit.engines.quantization.lowbit import PackedLinear, quantize_rtn, replay_layers
from slimkit.engines.quantization.lowbit.kernels import CPU_SMALL_BATCH
from slimkit.engines.quantization.lowbit.rtn import fake_quantize, group_mask, grouped
from slimkit.errors import ConfigError


def _layer(bits=4, out_f=24, in_f=80, group=32, sym=False, bias=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(out_f, in_f, generator=gen)
    b = torch.randn(out_f, generator=gen) if bias else None
    q, s, z = quantize_rtn(w, bits, group, sym)
    return w, PackedLinear.from_quantized(q, s, z, bits, group, b)


def _reference(layer, x):
    return F.linear(x, layer.dequantize(), layer.bias)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("rows", [1, CPU_SMALL_BATCH, 37])
def test_forward_matches_dense_dequantised_weight(bits, rows):
    _, layer = _layer(bits)
    x = torch.randn(rows, 80)
    out = layer(x)
    torch.testing.assert_close(out, _reference(layer, x), atol=1e-4, rtol=1e-4)
    layer.use_kernel = False  # the plain dequantise path gives the same numbers
    torch.testing.assert_close(layer(x), out, atol=1e-4, rtol=1e-4)


def test_forward_keeps_leading_dims_and_handles_no_bias():
    _, layer = _layer(bias=False)
    for shape in [(1, 1, 80), (2, 3, 80)]:
        x = torch.randn(*shape)
        assert layer(x).shape == (*shape[:-1], 24)
        torch.testing.assert_close(layer(x), _reference(layer, x), atol=1e-4, rtol=1e-4)


def test_group_wise_scales_and_zeros_follow_each_groups_range():
    w, layer = _layer(bits=4, in_f=80, group=32)  # groups of 32, 32 and a partial 16
    assert layer.scales.shape == (24, 3) and layer.scales.dtype == torch.float16
    wg = grouped(w, 32)
    mask = group_mask(80, 32)
    lo = wg.masked_fill(~mask, float("inf")).amin(-1).clamp(max=0)
    hi = wg.masked_fill(~mask, float("-inf")).amax(-1).clamp(min=0)
    torch.testing.assert_close(layer.scales.float(), ((hi - lo) / 15).half().float())
    assert torch.equal(layer.zeros.float(), torch.round(-lo / layer.scales.float()).clamp(0, 15))
    # every weight is within half a step of its dequantised value
    err = (w - layer.dequantize()).abs()
    step = layer.scales.float().repeat_interleave(32, dim=1)[:, :80]
    assert bool((err <= step / 2 + 1e-6).all())


def test_symmetric_grid_uses_the_middle_code_as_zero():
    _, layer = _layer(bits=4, sym=True)
    assert torch.equal(layer.zeros, torch.full_like(layer.zeros, 8))


def test_dequantize_equals_fake_quantize():
    w, layer = _layer(bits=3)
    torch.testing.assert_close(layer.dequantize(), fake_quantize(w, 3, 32))


def test_input_scale_is_applied_to_the_input():
    w, layer = _layer()
    s = torch.rand(80) + 0.5
    q, sc, z = quantize_rtn(w, 4, 32)
    scaled = PackedLinear.from_quantized(q, sc, z, 4, 32, layer.bias.detach(), input_scale=s)
    x = torch.randn(5, 80)
    torch.testing.assert_close(scaled(x), layer(x * s), atol=1e-5, rtol=1e-5)


def test_state_dict_is_packed_tensors_only_and_reloads_strictly_into_an_empty_layer():
    _, layer = _layer(bits=4, out_f=24, in_f=80)
    state = layer.state_dict()
    assert set(state) == {"qweight", "scales", "zeros", "bias"}
    assert state["qweight"].dtype == torch.uint8 and state["qweight"].shape == (24, 40)
    empty = PackedLinear.from_spec(layer.spec())
    empty.load_state_dict(state, strict=True)
    x = torch.randn(3, 80)
    assert torch.equal(empty(x), layer(x))


def test_replay_swaps_in_empty_packed_layers_without_a_dense_weight():
    model = torch.nn.Sequential(torch.nn.Linear(80, 24), torch.nn.ReLU(), torch.nn.Linear(24, 8))
    _, layer = _layer(bits=4, out_f=24, in_f=80)
    replay_layers(model, {"0": layer.spec()})
    assert isinstance(model[0], PackedLinear)
    assert not any(p.dim() == 2 for p in model[0].parameters())
    assert all(b.dtype in (torch.uint8, torch.float16) for b in model[0].buffers())
    with pytest.raises(ConfigError, match="rebuilt model does not have"):
        replay_layers(model, {"missing": layer.spec()})


def test_bad_group_size_is_refused():
    with pytest.raises(ConfigError, match="group_size must be a positive int; got 0"):
        PackedLinear(8, 8, 4, 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 3, 40])
def test_half_activations_run_the_float32_path_with_an_explicit_cast(make_layer, dtype, rows):
    layer = make_layer(4, 48, 64, 32)
    x = torch.randn(rows, 64).to(dtype)
    with torch.no_grad():
        out = layer(x)
        assert out.dtype == dtype
        assert torch.equal(out, layer(x.float()).to(dtype))  # the same float32 computation, cast back
