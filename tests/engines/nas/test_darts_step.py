"""DARTS's architecture gradient (first and second order) against the exact unrolled gradient computed by autograd
through the virtual weight step, on a tiny differentiable choice; the weights are restored afterwards."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.engines.nas import DiffMutableOP
from slimkit.engines.nas.darts_step import arch_gradients


def _setup() -> tuple[nn.Sequential, DiffMutableOP, tuple, tuple]:
    torch.manual_seed(0)
    op = DiffMutableOP({"a": nn.Linear(4, 4), "b": nn.Sequential(nn.Linear(4, 4), nn.Tanh()), "skip": nn.Identity()})
    with torch.no_grad():
        op.arch_param.copy_(torch.tensor([0.3, -0.2, 0.1]))
    net = nn.Sequential(op, nn.Linear(4, 3)).double()
    op.arch_param = op.arch_param.double().detach().requires_grad_()
    g = torch.Generator().manual_seed(1)
    train = (torch.randn(8, 4, generator=g, dtype=torch.float64), torch.randint(0, 3, (8,), generator=g))
    held = (torch.randn(8, 4, generator=g, dtype=torch.float64), torch.randint(0, 3, (8,), generator=g))
    return net, op, train, held


def _exact_unrolled(net: nn.Sequential, op: DiffMutableOP, train: tuple, held: tuple, xi: float) -> torch.Tensor:
    """d/d alpha of L_val(w - xi * dL_train/dw(w, alpha), alpha), differentiating through the virtual step."""
    names = [n for n, _ in net.named_parameters()]
    weights = [p for _, p in net.named_parameters()]
    alpha = op.arch_parameter()
    dw = torch.autograd.grad(F.cross_entropy(net(train[0]), train[1]), weights, create_graph=True)
    virtual = {n: w - xi * g for n, w, g in zip(names, weights, dw, strict=True)}
    out = torch.func.functional_call(net, virtual, (held[0],))
    (grad,) = torch.autograd.grad(F.cross_entropy(out, held[1]), [alpha])
    return grad


def test_first_order_is_the_held_out_gradient():
    net, op, train, held = _setup()
    alpha = op.arch_parameter()
    (expected,) = torch.autograd.grad(F.cross_entropy(net(held[0]), held[1]), [alpha])
    loss, (grad,) = arch_gradients(lambda: F.cross_entropy(net(train[0]), train[1]),
                                   lambda: F.cross_entropy(net(held[0]), held[1]), [alpha], list(net.parameters()),
                                   lambda on: setattr(op, "arch_grad", on))
    torch.testing.assert_close(grad, expected)
    assert float(loss.detach()) == pytest.approx(float(F.cross_entropy(net(held[0]), held[1]).detach()))
    assert op.arch_grad is False  # the weights' own pass does not reach alpha


def test_second_order_matches_the_exact_unrolled_gradient_and_restores_the_weights():
    net, op, train, held = _setup()
    xi = 0.5
    exact = _exact_unrolled(net, op, train, held, xi)
    before = [p.detach().clone() for p in net.parameters()]
    alpha = op.arch_parameter()
    first = torch.autograd.grad(F.cross_entropy(net(held[0]), held[1]), [alpha])[0]
    _, (grad,) = arch_gradients(lambda: F.cross_entropy(net(train[0]), train[1]),
                                lambda: F.cross_entropy(net(held[0]), held[1]), [alpha], list(net.parameters()),
                                lambda on: setattr(op, "arch_grad", on), unroll_lr=xi)
    torch.testing.assert_close(grad, exact, rtol=1e-4, atol=1e-7)  # finite-difference Hessian-vector product
    assert float((grad - first).abs().max()) > 1e-3  # and the second-order term is not negligible here
    for p, b in zip(net.parameters(), before, strict=True):
        assert torch.equal(p, b)
