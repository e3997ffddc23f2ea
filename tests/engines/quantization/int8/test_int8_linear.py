"""Int8Linear on every x86 CPU: each test asserts what the CPU probe reports, on both recipes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from slimkit.core.tensors import flatten_state_dict, load_flat_state_dict
from slimkit.engines.quantization.int8.linear import (
    FORCE_ENV,
    FULL_RANGE,
    SATURATION_SAFE,
    Int8Linear,
    choose_path,
    full_range_is_exact,
    pair_safe_levels,
    quantize_layers,
    quantize_weight,
)
from slimkit.zoo import build

ROOT = Path(__file__).resolve().parents[3]


def _run_with_fbgemm_avx2(code: str) -> str:
    """Run ``code`` in a fresh process whose fbgemm uses its AVX2 kernels (the native ones on an AVX2-only CPU)."""
    env = {**os.environ, "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def _loud_linear() -> tuple[torch.nn.Linear, torch.Tensor]:
    torch.manual_seed(0)
    fp32 = torch.nn.Linear(64, 16)
    with torch.no_grad():
        fp32.weight[3] *= 50  # one loud output channel must not cost the others their precision
    return fp32, torch.randn(32, 64)


def _rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float(((out - ref).abs() / ref.abs().amax(dim=0)).max())


def test_probe_says_whether_the_kernel_saturates_and_the_path_follows_it():
    ones = torch.nn.Linear(512, 4, bias=False)
    torch.nn.init.ones_(ones.weight)
    out = Int8Linear.from_linear(ones)(torch.ones(8, 512))  # every pair: 255 * 127 * 2 = 64770 > 32767
    saturated = torch.full_like(out, 32767 * 256 / 255 / 127)  # every int16 pair sum clipped at 32767
    if full_range_is_exact():
        torch.testing.assert_close(out, torch.full_like(out, 512.0), rtol=1e-3, atol=0)
        assert choose_path() == FULL_RANGE and choose_path(saturation_safe=False) == FULL_RANGE
    else:
        torch.testing.assert_close(out, saturated, rtol=1e-5, atol=0)
        assert choose_path() == SATURATION_SAFE and choose_path(saturation_safe=False) == SATURATION_SAFE
    assert choose_path(saturation_safe=True) == SATURATION_SAFE
    safe = Int8Linear.from_linear(ones, saturation_safe=True)(torch.ones(8, 512))
    torch.testing.assert_close(safe, torch.full_like(safe, 512.0), rtol=1e-2, atol=0)  # exact on every CPU


def test_fbgemm_avx2_kernels_saturate_and_the_probe_notices():
    out = _run_with_fbgemm_avx2("""
        from slimkit.engines.quantization.int8.linear import choose_path, full_range_is_exact
        print(full_range_is_exact(), choose_path())
    """)
    assert out.splitlines()[-1] == f"False {SATURATION_SAFE}"


def test_env_var_forces_the_saturation_safe_path(monkeypatch):
    monkeypatch.setenv(FORCE_ENV, "1")
    assert choose_path() == SATURATION_SAFE
    monkeypatch.setenv(FORCE_ENV, "0")
    assert choose_path() == (FULL_RANGE if full_range_is_exact() else SATURATION_SAFE)


def test_pair_safe_levels_keep_every_adjacent_pair_within_int16():
    torch.manual_seed(0)
    weight = torch.randn(48, 33)  # odd K: fbgemm pads a zero
    weight[:8, :2] = 5.0  # both weights of a pair at the channel maximum: 64 levels
    weight[8:16] = torch.randn(8, 33) * 1e-3
    weight[8:16, 0] = 1.0  # a lone spike per channel: its pair partner is tiny, so ~127 levels stay
    levels = pair_safe_levels(weight)
    assert levels.min() >= 64 and levels.max() <= 127
    assert bool((levels[:8] == 64).all()) and bool((levels[8:16] >= 126).all())
    codes = torch.nn.functional.pad(quantize_weight(weight, saturation_safe=True).int_repr().long().abs(), (0, 1))
    assert int((codes[:, 0::2] + codes[:, 1::2]).max()) <= 128  # 255 * 128 = 32640 <= 32767


@pytest.mark.parametrize("recipe", [FULL_RANGE, SATURATION_SAFE])
def test_int8_linear_is_close_and_uses_per_channel_weights(recipe):
    fp32, x = _loud_linear()
    q = Int8Linear.from_linear(fp32, saturation_safe=recipe == SATURATION_SAFE)
    assert q.weight().qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric)
    assert "activation_bits=8" in repr(q)
    ref = fp32(x).detach()
    if recipe == SATURATION_SAFE:  # 64..127 levels per channel: up to twice the 127-level step
        assert _rel_error(q(x), ref) < 0.04
    elif full_range_is_exact():
        assert _rel_error(q(x), ref) < 0.02
    else:  # the AVX2 kernel: 8-bit activations times 127-level weights saturate int16 pair sums
        assert _rel_error(q(x), ref) > 0.05


def test_the_path_the_probe_picks_is_close_on_this_cpu():
    fp32, x = _loud_linear()
    q = Int8Linear.from_linear(fp32, saturation_safe=choose_path() == SATURATION_SAFE)
    assert _rel_error(q(x), fp32(x).detach()) < 0.04


def test_8bit_activations_beat_7bit_on_outlier_inputs():
    torch.manual_seed(0)
    fp32 = torch.nn.Linear(128, 64)
    x = torch.randn(256, 128)
    x[:, 7] *= 30  # an outlier channel stretches the per-tensor activation range
    ref = fp32(x).detach()
    safe = choose_path() == SATURATION_SAFE
    errors = [float((Int8Linear.from_linear(fp32, rr, safe)(x) - ref).pow(2).mean()) for rr in (False, True)]
    assert errors[0] < 0.5 * errors[1]


@pytest.mark.parametrize("safe", [False, True])
def test_quantize_layers_and_state_dict_round_trip(safe):
    model = build("mlp")
    x = torch.randn(4, 32)
    quantize_layers(model, ["fc1", "fc3"], reduce_range=False, saturation_safe=safe)
    assert type(model.fc1) is Int8Linear and type(model.fc2) is torch.nn.Linear and type(model.fc3) is Int8Linear
    fresh = quantize_layers(build("mlp", seed=1), ["fc1", "fc3"], reduce_range=False, saturation_safe=safe)
    load_flat_state_dict(fresh, flatten_state_dict(model), strict=True)
    assert torch.equal(fresh(x), model(x))


def test_requantize_on_load_makes_full_range_weights_pair_safe():
    model = quantize_layers(build("mlp"), ["fc1", "fc3"], reduce_range=False)
    fresh = quantize_layers(build("mlp", seed=1), ["fc1", "fc3"], reduce_range=False, requantize_on_load=True)
    load_flat_state_dict(fresh, flatten_state_dict(model), strict=True)
    for name in ("fc1", "fc3"):
        codes = fresh.get_submodule(name).weight().int_repr().long().abs()
        assert int((codes[:, 0::2] + codes[:, 1::2]).max()) <= 128 and fresh.get_submodule(name).saturation_safe
    x = torch.randn(16, 32)
    with torch.no_grad():  # against fp32: a full-range model itself saturates on an AVX2 CPU
        cos = torch.nn.functional.cosine_similarity(fresh(x), build("mlp")(x), dim=1)
    assert float(cos.min()) > 0.999
