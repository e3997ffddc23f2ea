"""The gradient of DARTS's architecture logits, first or second order (Liu, Simonyan & Yang, ICLR 2019, eq. 6-8).

* first order: ``grad_alpha L_val(w, alpha)``;
* second order (the unrolled bi-level approximation): ``grad_alpha L_val(w', alpha) - xi * (grad_alpha
  L_train(w+, alpha) - grad_alpha L_train(w-, alpha)) / (2 eps)`` with the virtual step ``w' = w - xi * grad_w
  L_train(w, alpha)``, ``w+- = w +- eps * grad_w' L_val(w', alpha)`` and ``eps = 0.01 / ||grad_w' L_val||`` (a
  finite-difference Hessian-vector product). The weights are restored afterwards.

Used by the razor face's ``Darts`` and the smash algorithm ``darts`` alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Loss = Callable[[], torch.Tensor]


def _or_zero(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if grad is None else grad


def arch_gradients(train_loss: Loss, val_loss: Loss, alphas: Sequence[torch.Tensor], weights: Sequence[torch.Tensor],
                   set_arch_grad: Callable[[bool], None], unroll_lr: float | None = None
                   ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``(held-out loss, [d alpha])``: first order when ``unroll_lr`` is ``None``, else second order with ``xi``.

    ``train_loss`` / ``val_loss`` compute the loss on the training / held-out batch with the current weights;
    ``set_arch_grad(on)`` says whether the forward lets gradients reach alpha (the weights' own pass does not).
    """
    set_arch_grad(True)
    try:
        if unroll_lr is None:
            loss = val_loss()
            return loss, [_or_zero(g, a) for g, a in zip(torch.autograd.grad(loss, list(alphas), allow_unused=True),
                                                           alphas, strict=True)]
        return _unrolled(train_loss, val_loss, list(alphas), list(weights), set_arch_grad, float(unroll_lr))
    finally:
        set_arch_grad(False)


def _unrolled(train_loss: Loss, val_loss: Loss, alphas: list[torch.Tensor], weights: list[torch.Tensor],
              set_arch_grad: Callable[[bool], None], xi: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
    backup = [w.detach().clone() for w in weights]
    try:
        set_arch_grad(False)
        dw = torch.autograd.grad(train_loss(), weights, allow_unused=True)
        with torch.no_grad():  # the virtual step w' = w - xi * dL_train/dw
            for w, g in zip(weights, dw, strict=True):
                if g is not None:
                    w.sub_(xi * g)
        set_arch_grad(True)
        loss = val_loss()
        grads = torch.autograd.grad(loss, [*alphas, *weights], allow_unused=True)
        d_alpha, d_w = grads[: len(alphas)], grads[len(alphas):]
        squares = [(g.float() ** 2).sum() for g in d_w if g is not None]
        eps = 0.01 / max(float(torch.sqrt(torch.stack(squares).sum())) if squares else 0.0, 1e-12)
        hessian = []
        for sign in (1.0, -1.0):  # grad_alpha L_train at w +- eps * d_w
            with torch.no_grad():
                for w, b, g in zip(weights, backup, d_w, strict=True):
                    w.copy_(b if g is None else b + sign * eps * g)
            hessian.append(torch.autograd.grad(train_loss(), alphas, allow_unused=True))
    finally:
        with torch.no_grad():
            for w, b in zip(weights, backup, strict=True):
                w.copy_(b)
    return loss, [_or_zero(a, alpha) - xi * (_or_zero(plus, alpha) - _or_zero(minus, alpha)) / (2 * eps)
                  for a, plus, minus, alpha in zip(d_alpha, hessian[0], hessian[1], alphas, strict=True)]
