"""The plain-torch emulation of fbgemm's AVX2 int8 kernel: exact against the kernel, saturating where it does."""

from __future__ import annotations

import torch
import torch.ao.nn.quantized.dynamic as nnqd

from slimkit.engines.quantization.int8.emulation import (
    EmulatedAvx2Linear,
    avx2_int8_matmul,
    emulate_avx2,
    quantize_activations,
)
from slimkit.engines.quantization.int8.linear import Int8Linear, full_range_is_exact
from slimkit.engines.quantization.int8.per_token import PerTokenInt8Linear
from tests.engines.quantization.int8.test_int8_linear import _run_with_fbgemm_avx2


def _big_weight_linear(k: int = 385) -> torch.nn.Linear:
    torch.manual_seed(0)
    linear = torch.nn.Linear(k, 64)
    with torch.no_grad():  # every weight near the channel maximum: most pairs of 127-level codes exceed 128
        linear.weight.copy_(torch.randn(64, k).sign() * (0.75 + 0.25 * torch.rand(64, k)))
    return linear


def test_pairs_saturate_along_adjacent_k_only():
    codes = torch.tensor([[255, 255, 255, 0, 255, 255]])
    weight = torch.tensor([[127, 127, 127, 0, -100, -100]])
    # pairs (0,1): 64770 -> 32767; (2,3): 32385 exact; (4,5): -51000 -> -32768
    assert int(avx2_int8_matmul(codes, weight)) == 32767 + 32385 - 32768
    swapped = torch.tensor([[127, 0, 127, 127, -100, -100]])  # now pair (0,1) is safe and (2,3) saturates
    assert int(avx2_int8_matmul(torch.full((1, 6), 255), swapped)) == 32385 + 32767 - 32768
    odd = torch.tensor([[255, 255, 255]]), torch.tensor([[127, 127, 127]])  # K padded with a zero
    assert int(avx2_int8_matmul(*odd)) == 32767 + 255 * 127


def test_full_8bit_activations_times_large_weights_saturate_and_the_safe_recipe_does_not():
    linear = _big_weight_linear()
    x = torch.rand(32, 385) * 3 - 0.5
    ref = linear(x).detach()
    errors = {}
    for safe in (False, True):
        q = Int8Linear.from_linear(linear, saturation_safe=safe)
        emulated = EmulatedAvx2Linear(q)(x)
        errors[safe] = float((emulated - ref).norm() / ref.norm())
        kernel = q(x)
        if safe or not full_range_is_exact():  # nothing saturates, or this CPU's kernel is the AVX2 one
            assert torch.equal(emulated, kernel)
        else:  # a VNNI/AMX kernel: exact where the AVX2 emulation saturates
            assert float((kernel - ref).norm() / ref.norm()) < 0.01
    assert errors[False] > 0.05 and errors[True] < 0.01


def test_seven_bit_activations_never_saturate():
    linear = _big_weight_linear(64)
    x = torch.rand(16, 64) * 2
    q = Int8Linear.from_linear(linear, reduce_range=True)
    codes, _, _ = quantize_activations(x, reduce_range=True)
    assert int(codes.max()) <= 127
    torch.testing.assert_close(EmulatedAvx2Linear(q)(x), q(x), rtol=0, atol=0)


def test_emulate_avx2_swaps_every_dynamic_int8_linear_and_keeps_the_input():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    # 7-bit activations: no pair of products reaches int16's limit, so the emulated AVX2 kernel and the host's own
    # (VNNI/AMX accumulate exactly) agree on every CPU; with 8 bits they differ where AVX2 saturates
    model[0] = Int8Linear.from_linear(model[0], True)
    with torch.no_grad():
        model[2] = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(model[2]), {torch.nn.Linear})[0]
    emulated = emulate_avx2(model)
    assert [type(m) for m in emulated] == [EmulatedAvx2Linear, torch.nn.ReLU, EmulatedAvx2Linear]
    assert type(model[0]) is Int8Linear and type(model[2]) is nnqd.Linear
    assert emulated[2].reduce_range  # torch.ao's dynamic Linear always quantizes activations to 7 bits
    x = torch.randn(5, 8)
    torch.testing.assert_close(emulated(x), model(x), rtol=0, atol=0)


def test_emulate_avx2_keeps_per_token_scales():
    torch.manual_seed(0)
    linear = torch.nn.Linear(16, 8)
    model = torch.nn.Sequential(PerTokenInt8Linear.from_dynamic(Int8Linear.from_linear(linear, True)))
    model[0].reduce_range = False  # as built on a VNNI CPU; reloaded on an AVX2-only one it picks 7 bits
    emulated = emulate_avx2(model)
    assert type(emulated[0]) is EmulatedAvx2Linear and emulated[0].per_token and emulated[0].reduce_range
    model[0].reduce_range = True  # 7-bit activations: no saturation, so any CPU's kernel is the AVX2 result
    x = torch.randn(6, 16) * torch.logspace(-2, 2, 6)[:, None]  # tokens of very different sizes
    torch.testing.assert_close(emulated(x), model(x), rtol=0, atol=0)
    per_tensor = EmulatedAvx2Linear(Int8Linear.from_linear(linear, True))(x)  # the small tokens lose their codes
    assert float((per_tensor - linear(x))[:2].abs().max()) > 10 * float((emulated(x) - linear(x))[:2].abs().max())


def test_emulation_is_bit_exact_against_fbgemm_avx2_kernels():
    out = _run_with_fbgemm_avx2("""
        import torch
        from slimkit.engines.quantization.int8.emulation import EmulatedAvx2Linear
        from slimkit.engines.quantization.int8.linear import Int8Linear
        from slimkit.engines.quantization.int8.per_token import PerTokenInt8Linear
        torch.manual_seed(0)
        linear = torch.nn.Linear(385, 64)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(64, 385).sign() * (0.75 + 0.25 * torch.rand(64, 385)))
        x = torch.rand(32, 385) * 3 - 0.5
        results = []
        for safe in (False, True):
            for rr in (False, True):
                q = Int8Linear.from_linear(linear, rr, safe)
                results.append(torch.equal(EmulatedAvx2Linear(q)(x), q(x)))
                token = PerTokenInt8Linear.from_dynamic(q)
                token.reduce_range = rr  # the machine's choice, set to each case here
                results.append(torch.equal(EmulatedAvx2Linear(token)(x), token(x)))
        ref = linear(x)
        err = float((Int8Linear.from_linear(linear)(x) - ref).norm() / ref.norm())
        print(all(results), err > 0.05)
    """)
    assert out.splitlines()[-1] == "True True"
