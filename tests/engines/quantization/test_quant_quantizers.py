"""Each quantizer's forward: grid size, the paper's formula, observers, schedules and optimizer hooks."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from slimkit.engines.quantization import (
    BNNEngine,
    DoReFaEngine,
    LsqEngine,
    QATEngine,
    dequantize,
)


def _net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 6, 3), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 6 * 6, 16), nn.ReLU(), nn.Linear(16, 4)
    )


def _x(n: int = 8) -> torch.Tensor:
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(1))


def _levels(weight: torch.Tensor, per_channel: bool) -> int:
    rows = weight.reshape(weight.shape[0], -1) if per_channel else weight.reshape(1, -1)
    return max(int(torch.unique(row).numel()) for row in rows)


CASES = [
    (QATEngine, 8, {}, True),
    (QATEngine, 3, {}, True),
    (QATEngine, 2, {"per_channel": False}, False),
    (DoReFaEngine, 8, {}, False),
    (DoReFaEngine, 2, {"rescale": False}, False),
    (DoReFaEngine, 1, {}, False),
    (LsqEngine, 8, {}, False),
    (LsqEngine, 3, {}, False),
    (BNNEngine, 1, {}, True),
    (BNNEngine, 1, {"scale_weights": False}, False),
]


@pytest.mark.parametrize(("cls", "bits", "kwargs", "per_channel"), CASES)
def test_weights_take_at_most_2_pow_bits_values(cls, bits, kwargs, per_channel):
    model = _net()
    reference = _net()
    quantizer = cls(model, [{"quant_types": ["weight"], "quant_bits": bits, "op_types": ["default"]}], **kwargs)
    model.train()
    out = model(_x())
    assert out.shape == (8, 4) and torch.isfinite(out).all()
    for wrapper in quantizer.get_modules_wrapper():
        weight = quantizer.quantized_weight(wrapper)
        assert _levels(weight, per_channel) <= 2**bits
        original = reference.get_submodule(wrapper.name).weight.detach()
        if original[0].numel() > 2**bits:
            assert _levels(original, per_channel) > 2**bits  # the float weight really had more values
        assert not torch.equal(weight, original)
        codes, scale, zero_point = quantizer.weight_codes(wrapper)
        assert int(codes.min()) >= 0 and int(codes.max()) <= 2**bits - 1
        assert torch.equal(codes, torch.round(codes))
        torch.testing.assert_close(dequantize(codes, scale, zero_point), weight, atol=1e-6, rtol=1e-5)


def test_qat_per_channel_scale_follows_each_channels_range():
    model = _net()
    quantizer = QATEngine(model, [{"quant_types": ["weight"], "quant_bits": 8, "op_names": ["0"]}])
    wrapper = quantizer.modules_wrapper[0]
    weight = wrapper.module.weight.detach()
    quantizer.quantized_weight(wrapper)
    flat = weight.reshape(6, -1)
    low, high = flat.min(1).values.clamp(max=0), flat.max(1).values.clamp(min=0)
    torch.testing.assert_close(wrapper.weight_scale.flatten(), (high - low) / 255)
    # per-channel error is at most half a step of that channel
    error = (quantizer.quantized_weight(wrapper) - weight).abs().reshape(6, -1).max(1).values
    assert torch.all(error <= wrapper.weight_scale.flatten() / 2 + 1e-7)


def test_qat_ema_observer_updates_only_in_train_mode():
    model = nn.Sequential(nn.Linear(3, 3))
    quantizer = QATEngine(model, [{"quant_types": ["output"], "quant_bits": 8, "op_types": ["Linear"]}],
                             ema_decay=0.9)
    wrapper = quantizer.modules_wrapper[0]
    with torch.no_grad():
        wrapper.module.weight.copy_(torch.eye(3))
        wrapper.module.bias.zero_()
    model.train()
    model(torch.tensor([[-1.0, 0.0, 2.0]]))
    assert float(wrapper.output_tracked_min) == -1.0 and float(wrapper.output_tracked_max) == 2.0
    model(torch.tensor([[-3.0, 0.0, 4.0]]))
    assert float(wrapper.output_tracked_min) == pytest.approx(0.9 * -1 + 0.1 * -3)
    assert float(wrapper.output_tracked_max) == pytest.approx(0.9 * 2 + 0.1 * 4)
    model.eval()
    out = model(torch.tensor([[-10.0, 0.5, 10.0]])).detach()
    assert int(wrapper.output_observed) == 2
    assert float(out[0, 0]) == pytest.approx(-1.2, abs=1e-5) and float(out[0, 2]) == pytest.approx(2.2, abs=0.01)


def test_qat_quant_start_step_and_optimizer_hook():
    model = nn.Sequential(nn.Linear(4, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    quantizer = QATEngine(
        model, [{"quant_types": ["output"], "quant_bits": 2, "op_types": ["Linear"], "quant_start_step": 2}],
        optimizer,
    )
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    layer = quantizer.modules_wrapper[0].module
    plain = x @ layer.weight.detach().T + layer.bias.detach()
    model.train()
    for step in range(3):
        out = model(x)
        if step < 2:
            torch.testing.assert_close(out, plain)  # observed, not yet quantized
        else:
            assert torch.unique(out).numel() <= 4  # 2 bits
        out.sum().backward()
        optimizer.step()
    assert quantizer.steps == 3
    quantizer.update_epoch(5)
    assert quantizer.epoch == 5
    quantizer.unwrap_model()
    assert isinstance(model[0], nn.Linear)
    optimizer.step()
    assert quantizer.steps == 3  # the hook is gone


def test_dorefa_matches_the_paper_formula():
    model = _net()
    quantizer = DoReFaEngine(model, [{"quant_types": ["weight"], "quant_bits": 3, "op_names": ["5"]}],
                                rescale=False)
    wrapper = quantizer.modules_wrapper[0]
    w = wrapper.module.weight.detach()
    t = torch.tanh(w)
    expected = 2 * torch.round((t / (2 * t.abs().max()) + 0.5) * 7) / 7 - 1
    torch.testing.assert_close(quantizer.quantized_weight(wrapper), expected)
    grid = {round(-1 + 2 * k / 7, 5) for k in range(8)}
    assert {round(v, 5) for v in expected.unique().tolist()} <= grid


def test_dorefa_rescale_keeps_the_weight_range_and_gradients_flow_through_tanh():
    model = _net()
    quantizer = DoReFaEngine(model, [{"quant_types": ["weight", "output"], "quant_bits": 8, "op_names": ["3"]}])
    wrapper = quantizer.modules_wrapper[0]
    w = wrapper.module.weight
    assert float(quantizer.quantized_weight(wrapper).abs().max()) == pytest.approx(float(w.detach().abs().max()))
    out = model[3](torch.randn(2, 216)).detach()
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0  # output clamped to [0, 1]
    assert torch.unique(out).numel() <= 256
    model(_x()).sum().backward()
    assert w.grad is not None and w.grad.abs().sum() > 0


def test_bnn_weights_are_plus_minus_alpha_and_latent_weights_are_clipped():
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=10.0)
    quantizer = BNNEngine(model, [{"quant_types": ["weight"], "quant_bits": 1, "op_types": ["default"]}], optimizer)
    wrapper = quantizer.modules_wrapper[1]
    w = wrapper.module.weight.detach().clone()
    alpha = w.abs().mean(dim=1, keepdim=True)
    torch.testing.assert_close(quantizer.quantized_weight(wrapper), torch.where(w > 0, alpha, -alpha))
    model.train()
    model(_x()).sum().backward()
    unclipped = max(float((w.module.weight - 10.0 * w.module.weight.grad).detach().abs().max())
                    for w in quantizer.modules_wrapper)
    assert unclipped > 1.0  # plain SGD would leave latent weights beyond 1 ...
    optimizer.step()
    for wrapper in quantizer.modules_wrapper:  # ... BNN clips them back
        assert float(wrapper.module.weight.detach().abs().max()) <= 1.0
    assert quantizer.steps == 1


def test_lsq_initialisation_and_optimizer_param_group():
    model = _net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    quantizer = LsqEngine(
        model, [{"quant_types": ["weight", "input"], "quant_bits": 4, "op_types": ["Linear"]}], optimizer
    )
    first = quantizer.modules_wrapper[0]  # model[3]: its input comes from a ReLU, so it is non-negative
    w = first.module.weight.detach()
    assert float(first.weight_scale.detach()) == pytest.approx(2 * float(w.abs().mean()) / math.sqrt(7), rel=1e-5)
    assert len(optimizer.param_groups) == 2 and optimizer.param_groups[1]["weight_decay"] == 0.0
    assert {id(p) for p in optimizer.param_groups[1]["params"]} == {id(p) for p in quantizer.parameters()}
    model.eval()
    x = _x()
    plain = model(x)  # input steps are not initialised yet: inputs pass through unquantized
    assert int(first.input_initialized) == 0
    model.train()
    model(x).sum().backward()
    assert int(first.input_initialized) == 1 and float(first.input_zero_point) == 0.0  # unsigned after ReLU
    assert first.input_scale.grad is not None and first.weight_scale.grad is not None
    before = float(first.input_scale.detach())
    optimizer.step()
    assert float(first.input_scale.detach()) != before  # the step size is learned
    model.eval()
    assert not torch.equal(model(x), plain)
