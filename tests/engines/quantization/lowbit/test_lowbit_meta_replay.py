"""PackedLinear replay on a base whose parameters are on the meta device (the weightless reload skeleton)."""

from __future__ import annotations

import torch
from torch import nn

from slimkit.core.tensors import flatten_state_dict, load_flat_state_dict
from slimkit.engine.base_model import meta_parameters, meta_tensors
from slimkit.engines.quantization.lowbit import PackedLinear, quantize_model_rtn
from slimkit.engines.quantization.lowbit.layers import replay_layers


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(48, 40), nn.ReLU(), nn.Linear(40, 8, bias=False))


def test_from_spec_with_a_meta_device_builds_real_cpu_buffers():
    spec = {"in_features": 48, "out_features": 40, "bits": 4, "group_size": 16, "bias": True, "input_scale": True}
    layer = PackedLinear.from_spec(spec, dtype=torch.float16, device=torch.device("meta"))
    tensors = dict(layer.named_buffers()) | dict(layer.named_parameters())
    assert sorted(tensors) == ["bias", "input_scale", "qweight", "scales", "zeros"]
    assert all(t.device.type == "cpu" for t in tensors.values())
    assert layer.bias.dtype == torch.float16 and layer.input_scale.dtype == torch.float16
    assert tuple(layer.qweight.shape) == (40, 24) and tuple(layer.scales.shape) == (40, 3)
    assert PackedLinear.from_spec(spec, device="meta").bias.dtype == torch.float32


def test_replay_on_a_meta_skeleton_then_assign_load_matches_the_quantized_model():
    quantized = _net()
    specs = quantize_model_rtn(quantized, 4, 16, False, ())
    x = torch.randn(5, 48)
    with meta_parameters():
        skeleton = _net().half()
    assert all(p.is_meta for p in skeleton.parameters())
    replay_layers(skeleton, specs)
    packed = [m for m in skeleton.modules() if isinstance(m, PackedLinear)]
    assert len(packed) == 2 and packed[0].bias.dtype == torch.float16  # dtype taken from the meta weight
    assert all(not b.is_meta for m in packed for b in m.buffers())
    load_flat_state_dict(skeleton, flatten_state_dict(quantized.half()), assign=True)
    assert meta_tensors(skeleton) == []
    with torch.no_grad():
        assert torch.equal(skeleton(x.half()), quantized(x.half()))
