"""Fixtures of the low-bit kernel tests: a fresh kernel cache, and seeded packed layers."""

from __future__ import annotations

import pytest
import torch

from slimkit.engines.quantization.lowbit import PackedLinear, native, quantize_rtn


@pytest.fixture
def fresh_kernel(monkeypatch, tmp_path):
    """An empty kernel cache and no loaded library, restored afterwards."""
    monkeypatch.setenv("SLIMKIT_CACHE", str(tmp_path))
    saved = dict(native._STATE)
    native._STATE.clear()
    yield tmp_path
    native._STATE.clear()
    native._STATE.update(saved)


def _layer(bits, out_f, in_f, group, bias=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(out_f, in_f, generator=gen)
    q, s, z = quantize_rtn(w, bits, group, False)
    return PackedLinear.from_quantized(q, s, z, bits, group, torch.randn(out_f, generator=gen) if bias else None)


@pytest.fixture
def make_layer():
    """``make_layer(bits, out_f, in_f, group, bias=True, seed=0)``: a seeded RTN-packed layer."""
    return _layer
