from __future__ import annotations

import torch

from slimkit.compression.quantization.int8.linear import Int8Linear, full_range_is_exact, quantize_layers
from slimkit.core.tensors import flatten_state_dict, load_flat_state_dict
from slimkit.zoo import build


def test_fbgemm_full_range_is_exact_here():
    # the probe behind 8-bit activations: 255 * 127 products summed in pairs must not saturate
    assert full_range_is_exact() is True


def test_int8_linear_is_close_and_uses_per_channel_weights():
    torch.manual_seed(0)
    fp32 = torch.nn.Linear(64, 16)
    with torch.no_grad():
        fp32.weight[3] *= 50  # one loud output channel must not cost the others their precision
    x = torch.randn(32, 64)
    q = Int8Linear.from_linear(fp32)
    assert q.weight().qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric)
    ref = fp32(x).detach()
    err = (q(x) - ref).abs() / ref.abs().amax(dim=0)
    assert float(err.max()) < 0.02
    assert "activation_bits=8" in repr(q)


def test_8bit_activations_beat_7bit_on_outlier_inputs():
    torch.manual_seed(0)
    fp32 = torch.nn.Linear(128, 64)
    x = torch.randn(256, 128)
    x[:, 7] *= 30  # an outlier channel stretches the per-tensor activation range
    ref = fp32(x).detach()
    errors = [float((Int8Linear.from_linear(fp32, rr)(x) - ref).pow(2).mean()) for rr in (False, True)]
    assert errors[0] < 0.5 * errors[1]


def test_quantize_layers_and_state_dict_round_trip():
    model = build("mlp")
    x = torch.randn(4, 32)
    quantize_layers(model, ["fc1", "fc3"], reduce_range=False)
    assert type(model.fc1) is Int8Linear and type(model.fc2) is torch.nn.Linear and type(model.fc3) is Int8Linear
    fresh = quantize_layers(build("mlp", seed=1), ["fc1", "fc3"], reduce_range=False)
    load_flat_state_dict(fresh, flatten_state_dict(model), strict=True)
    assert torch.equal(fresh(x), model(x))
