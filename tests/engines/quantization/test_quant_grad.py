"""Straight-through gradients: the default passes everything, overrides change what happens outside the range."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from slimkit.engines.quantization import (
    BNNEngine,
    BNNGrad,
    ClipGrad,
    LsqEngine,
    QATEngine,
    QuantGrad,
    Quantizer,
    QuantType,
    fake_quantize,
    grad_scale,
    round_ste,
)

# scale 0.01 and zero point 128 at 8 bits: representable range [-1.28, 1.27]
SCALE, ZERO_POINT = 0.01, 128.0
VALUES = torch.tensor([-3.0, -1.5, -1.2, -0.333, 0.0, 0.004, 0.5, 1.26, 1.4, 2.0])
INSIDE = torch.tensor([False, False, True, True, True, True, True, True, False, False])


class FixedScaleQuantizer(Quantizer):
    """Affine fake-quantization with a fixed scale, so the clamp range is known in advance."""

    def _init_wrapper(self, wrapper):
        for t in wrapper.quant_types:
            wrapper.register_buffer(f"{t.value}_scale", torch.tensor([SCALE]))
            wrapper.register_buffer(f"{t.value}_zero_point", torch.tensor([ZERO_POINT]))

    def quantize_weight(self, weight, wrapper, **kwargs):
        return fake_quantize(weight, wrapper.weight_scale, wrapper.weight_zero_point, wrapper.bits("weight"))

    def quantize_output(self, output, wrapper, **kwargs):
        return fake_quantize(output, wrapper.output_scale, wrapper.output_zero_point, wrapper.bits("output"))


class ClipQuantizer(FixedScaleQuantizer):
    quant_grad = ClipGrad


class OldStyleGrad(QuantGrad):
    """NNI 1.x signature: (tensor, grad_output, quant_type); halves output gradients, keeps weight ones."""

    @staticmethod
    def quant_backward(tensor, grad_output, quant_type):
        if quant_type == QuantType.QUANT_OUTPUT:
            return grad_output * 0.5
        return grad_output


def _wrapper(quantizer_cls=FixedScaleQuantizer, types=("weight", "output")):
    model = nn.Sequential(nn.Linear(len(VALUES), 1))
    quantizer = quantizer_cls(model, [{"quant_types": list(types), "quant_bits": 8, "op_types": ["Linear"]}])
    return quantizer.modules_wrapper[0]


def _grad(grad_cls, wrapper, quant_type=QuantType.WEIGHT):
    x = VALUES.clone().requires_grad_(True)
    upstream = torch.arange(1.0, len(VALUES) + 1)
    out = grad_cls.apply(x, quant_type, wrapper)
    out.backward(upstream)
    return out.detach(), x.grad, upstream


def test_forward_is_the_quantizers_result():
    out, _, _ = _grad(QuantGrad, _wrapper())
    expected = torch.clamp(torch.round(VALUES / SCALE + ZERO_POINT), 0, 255)
    torch.testing.assert_close(out, (expected - ZERO_POINT) * SCALE)
    assert out.max() == pytest.approx(1.27) and out.min() == pytest.approx(-1.28)


def test_default_backward_is_straight_through_everywhere():
    _, grad, upstream = _grad(QuantGrad, _wrapper())
    assert torch.equal(grad, upstream)  # inside and outside the clamp range alike


def test_clip_grad_passes_inside_and_zeroes_outside():
    _, grad, upstream = _grad(ClipGrad, _wrapper())
    assert torch.equal(grad[INSIDE], upstream[INSIDE])
    assert torch.equal(grad[~INSIDE], torch.zeros(int((~INSIDE).sum())))


def test_quantizer_uses_its_quant_grad_in_forward():
    for cls, expect_clip in ((FixedScaleQuantizer, False), (ClipQuantizer, True)):
        wrapper = _wrapper(cls, types=("weight",))
        with torch.no_grad():
            wrapper.module.weight.copy_(VALUES.unsqueeze(0))
        x = torch.ones(1, len(VALUES))
        wrapper(x).sum().backward()
        grad = wrapper.module.weight.grad.squeeze(0)  # d(sum(x @ w_q.T))/dw = x = 1 where the gradient passes
        expected = torch.where(INSIDE, 1.0, 0.0) if expect_clip else torch.ones(len(VALUES))
        assert torch.equal(grad, expected), cls.__name__


def test_nni_style_three_argument_override():
    wrapper = _wrapper()
    _, grad_w, upstream = _grad(OldStyleGrad, wrapper, QuantType.WEIGHT)
    _, grad_o, _ = _grad(OldStyleGrad, wrapper, QuantType.OUTPUT)
    assert torch.equal(grad_w, upstream)
    assert torch.equal(grad_o, upstream * 0.5)


def test_override_receives_affine_parameters_and_range():
    seen = {}

    class Spy(QuantGrad):
        @staticmethod
        def quant_backward(tensor, grad_output, quant_type, scale, zero_point, qmin, qmax):
            seen.update(scale=float(scale), zero_point=float(zero_point), qmin=qmin, qmax=qmax, type=quant_type)
            return grad_output

    _grad(Spy, _wrapper())
    assert seen.pop("scale") == pytest.approx(SCALE)
    assert seen == {"zero_point": ZERO_POINT, "qmin": 0, "qmax": 255, "type": QuantType.WEIGHT}


def test_bnn_grad_cancels_beyond_magnitude_one():
    _, grad, upstream = _grad(BNNGrad, _wrapper())
    keep = VALUES.abs() <= 1
    assert torch.equal(grad[keep], upstream[keep]) and torch.all(grad[~keep] == 0)


def test_bnn_output_binarization_gradient_through_the_wrapper():
    model = nn.Sequential(nn.Identity())
    quantizer = BNNEngine(model, [{"quant_types": ["output"], "quant_bits": 1, "op_types": ["Identity"]}])
    x = VALUES.clone().requires_grad_(True)
    out = model(x)
    assert torch.equal(out, torch.where(VALUES > 0, 1.0, -1.0))
    out.sum().backward()
    assert torch.equal(x.grad, (VALUES.abs() <= 1).float())
    assert quantizer.modules_wrapper[0].type == "Identity"


def test_qat_output_gradient_is_zero_outside_the_observed_range():
    model = nn.Sequential(nn.Identity())
    quantizer = QATEngine(model, [{"quant_types": ["output"], "quant_bits": 8, "op_types": ["Identity"]}])
    model.train()
    model(torch.tensor([-1.0, 1.0]))  # observe the range [-1, 1]
    model.eval()  # freeze the observer
    x = torch.tensor([-2.0, -0.5, 0.25, 0.99, 3.0], requires_grad=True)
    model(x).sum().backward()
    assert torch.equal(x.grad, torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0]))
    assert quantizer.steps == 0


def test_round_ste_and_grad_scale():
    x = torch.tensor([0.4, 1.6, -2.5], requires_grad=True)
    y = round_ste(x)
    assert torch.equal(y, torch.round(x.detach()))
    y.sum().backward()
    assert torch.equal(x.grad, torch.ones(3))
    s = torch.tensor(2.0, requires_grad=True)
    z = grad_scale(s, 0.25)
    assert float(z.detach()) == 2.0
    (z * 3).backward()
    assert float(s.grad) == pytest.approx(0.75)


def test_lsq_step_gradient_matches_the_paper():
    model = nn.Sequential(nn.Linear(4, 1, bias=False))
    quantizer = LsqEngine(model, [{"quant_types": ["weight"], "quant_bits": 4, "op_types": ["Linear"]}])
    wrapper = quantizer.modules_wrapper[0]
    with torch.no_grad():
        wrapper.weight_scale.fill_(0.1)
    w = torch.tensor([0.04, -0.26, 2.0, -3.0], requires_grad=True)
    out = quantizer.quantize_weight(w, wrapper)
    out.sum().backward()
    v = w.detach() / 0.1
    q_n, q_p = 8, 7
    inside = (v >= -q_n) & (v <= q_p)
    expected_step = torch.where(inside, torch.round(v) - v, torch.where(v > 0, float(q_p), float(-q_n)))
    g = 1.0 / math.sqrt(w.numel() * q_p)
    assert float(wrapper.weight_scale.grad) == pytest.approx(float(expected_step.sum()) * g, rel=1e-5)
    assert torch.equal(w.grad, inside.float())  # the clamp stops the weight gradient outside the range
    torch.testing.assert_close(out.detach(), torch.clamp(torch.round(v), -q_n, q_p) * 0.1)
