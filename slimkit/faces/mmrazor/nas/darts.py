"""DARTS (Liu, Simonyan & Yang, ICLR 2019): differentiable architecture search (MMRazor's ``Darts``).

The supernet's choices (:class:`~slimkit.engines.nas.DiffMutableOP`) mix their candidates by ``softmax(alpha)``.
Each training step first updates the architecture parameters alpha on held-out data, then returns the task loss of
the weights on the training data (what :func:`slimkit.training.fit` steps its optimizer with; alpha is not among
the model's parameters). The alpha update is

* first order (``unroll=False``): ``grad_alpha L_val(w, alpha)``;
* second order (``unroll=True``, DARTS's bi-level approximation): ``grad_alpha L_val(w', alpha) - xi *
  (grad_alpha L_train(w+, alpha) - grad_alpha L_train(w-, alpha)) / (2 eps)`` with the virtual step
  ``w' = w - xi * grad_w L_train(w, alpha)``, ``w+- = w +- eps * grad_w' L_val(w', alpha)`` and
  ``eps = 0.01 / ||grad_w' L_val||`` (a finite-difference Hessian-vector product); ``xi`` is ``unroll_lr``.

Held-out data: the ``arch_batches`` you give (cycled), else the first half of each training batch (the second
half then trains the weights). :meth:`Darts.search_subnet` is the argmax architecture, :meth:`Darts.export`
its plain module (only the chosen op of each choice is left: physically smaller).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from slimkit.data.batches import split_batch
from slimkit.engines.nas import DiffMutableOP, NasMutator, export_subnet
from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.nas.spos import SPOS

#: the architecture optimizer of the DARTS paper (and MMRazor's configs)
DEFAULT_ARCH_OPTIMIZER: dict[str, Any] = {"type": "Adam", "lr": 3e-4, "betas": (0.5, 0.999), "weight_decay": 1e-3}


def optimizer_cfg(spec: Any, owner: str) -> dict[str, Any]:
    """The optimizer dict of ``arch_optimizer`` (itself, or its ``optimizer`` entry as in MMRazor's optim_wrapper)."""
    spec = DEFAULT_ARCH_OPTIMIZER if spec is None else spec
    inner = spec.get("optimizer", spec) if isinstance(spec, Mapping) else None
    if not isinstance(inner, Mapping):
        raise ConfigError(f"{owner}: arch_optimizer must be dict(type='Adam', lr=3e-4, ...) or dict(optimizer=...), "
                          f"got {spec!r}.")
    return dict(inner)


def torch_optimizer(params: list[torch.Tensor], cfg: Mapping[str, Any], owner: str) -> torch.optim.Optimizer:
    """The ``torch.optim`` optimizer ``cfg`` names (``dict(type='Adam', lr=...)``) over ``params``."""
    cfg = dict(cfg)
    kind = str(cfg.pop("type", "Adam")).rpartition(".")[2]
    cls = getattr(torch.optim, kind, None)
    if not isinstance(cls, type) or not issubclass(cls, torch.optim.Optimizer):
        raise ConfigError(f"{owner}: arch_optimizer type {kind!r} is not a torch.optim optimizer (e.g. 'Adam').")
    try:
        return cls(params, **cfg)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{owner}: arch_optimizer={dict(cfg, type=kind)!r}: {exc}.") from exc


def _half(value: Any, first: bool) -> Any:
    if isinstance(value, torch.Tensor):
        cut = value.shape[0] // 2
        return value[:cut] if first else value[cut:]
    if isinstance(value, Mapping):
        return {k: _half(v, first) for k, v in value.items()}
    return value


@register_module()
class Darts(SPOS):
    """DARTS over an architecture with :class:`~slimkit.engines.nas.DiffMutableOP` choices (see the module doc).

    ``arch_optimizer``: the alpha optimizer's config (a ``torch.optim`` type; default :data:`DEFAULT_ARCH_OPTIMIZER`);
    MMRazor's ``optim_wrapper=dict(mutator=dict(optimizer=...))`` gives it. ``arch_batches``: held-out
    ``(inputs, labels)`` batches for alpha. ``unroll_lr``: the virtual step's learning rate (the weights' own).
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any],
                 mutator: NasMutator | Mapping[str, Any] | None = None, unroll: bool = False,
                 arch_optimizer: Mapping[str, Any] | None = None, arch_batches: Iterable[Any] | None = None,
                 unroll_lr: float = 0.025, norm_training: bool = False, data_preprocessor: Any = None,
                 init_cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__(architecture, mutator, norm_training, data_preprocessor, init_cfg)
        self.diff_ops = {n: m for n, m in self.mutator.mutables.items() if isinstance(m, DiffMutableOP)}
        if not self.diff_ops:
            raise ConfigError("Darts needs an architecture with DiffMutableOP choices (e.g. mutable_cfg="
                              "dict(type='DiffMutableOP', candidates=...)); this one has only "
                              f"{sorted({type(m).__name__ for m in self.mutator.mutables.values()})}.")
        if isinstance(unroll_lr, bool) or not isinstance(unroll_lr, (int, float)) or unroll_lr <= 0:
            raise ConfigError(f"Darts: unroll_lr must be a number > 0, got {unroll_lr!r}.")
        self.unroll, self.unroll_lr = bool(unroll), float(unroll_lr)
        self.arch_optimizer_cfg = optimizer_cfg(arch_optimizer, "Darts")
        self._arch_opt: torch.optim.Optimizer | None = None
        self._arch_iter: Iterator[Any] | None = None
        self.last_arch_loss = float("nan")  # the held-out loss of the latest alpha step
        self.set_arch_batches(arch_batches)

    def set_arch_batches(self, batches: Iterable[Any] | None) -> None:
        """Held-out batches for the architecture step (cycled); ``None``: half of each training batch."""
        self._arch_iter = None if batches is None else itertools.cycle(batches)

    def arch_parameters(self) -> list[torch.Tensor]:
        """The architecture logits of every DiffMutableOP."""
        return [op.arch_parameter() for op in self.diff_ops.values()]

    def arch_optimizer(self) -> torch.optim.Optimizer:
        """The alpha optimizer (rebuilt if the parameters were moved)."""
        params = self.arch_parameters()
        if self._arch_opt is None or any(p is not q for p, q in zip(params, self._arch_opt.param_groups[0]["params"],
                                                                   strict=True)):
            self._arch_opt = torch_optimizer(params, self.arch_optimizer_cfg, "Darts")
        return self._arch_opt

    def _task(self, inputs: Any, data_samples: Any) -> torch.Tensor:
        losses = self.student_loss(inputs, data_samples)[0]
        return torch.stack([v.float() for v in losses.values()]).sum()

    def _set_arch_grad(self, on: bool) -> None:
        for op in self.diff_ops.values():
            op.arch_grad = on

    def arch_step(self, train: tuple[Any, Any], held_out: tuple[Any, Any]) -> float:
        """One update of alpha (first or second order); returns the held-out loss."""
        opt, alphas = self.arch_optimizer(), self.arch_parameters()
        weights = [p for p in self.architecture.parameters() if p.requires_grad]
        self._set_arch_grad(True)
        try:
            if not self.unroll:
                loss = self._task(*held_out)
                grads = torch.autograd.grad(loss, alphas, allow_unused=True)
            else:
                loss, grads = self._unrolled(train, held_out, alphas, weights)
        finally:
            self._set_arch_grad(False)
        opt.zero_grad()
        for alpha, grad in zip(alphas, grads, strict=True):
            alpha.grad = torch.zeros_like(alpha) if grad is None else grad.detach()
        opt.step()
        return float(loss.detach())

    def _unrolled(self, train: tuple[Any, Any], held_out: tuple[Any, Any], alphas: list[torch.Tensor],
                  weights: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        backup = [w.detach().clone() for w in weights]
        self._set_arch_grad(False)
        dw = torch.autograd.grad(self._task(*train), weights, allow_unused=True)
        with torch.no_grad():  # the virtual step w' = w - xi * dL_train/dw
            for w, g in zip(weights, dw, strict=True):
                if g is not None:
                    w.sub_(self.unroll_lr * g)
        self._set_arch_grad(True)
        loss = self._task(*held_out)
        grads = torch.autograd.grad(loss, [*alphas, *weights], allow_unused=True)
        d_alpha, d_w = grads[: len(alphas)], grads[len(alphas):]
        norm = torch.sqrt(sum((g.float() ** 2).sum() for g in d_w if g is not None)) if any(
            g is not None for g in d_w) else torch.tensor(0.0)
        eps = 0.01 / max(float(norm), 1e-12)
        hessian = []
        for sign in (1.0, -1.0):  # grad_alpha L_train at w +- eps * d_w
            with torch.no_grad():
                for w, b, g in zip(weights, backup, d_w, strict=True):
                    w.copy_(b if g is None else b + sign * eps * g)
            hessian.append(torch.autograd.grad(self._task(*train), alphas, allow_unused=True))
        with torch.no_grad():
            for w, b in zip(weights, backup, strict=True):
                w.copy_(b)
        out = []
        for a, plus, minus, alpha in zip(d_alpha, hessian[0], hessian[1], alphas, strict=True):
            zero = torch.zeros_like(alpha)
            hvp = ((plus if plus is not None else zero) - (minus if minus is not None else zero)) / (2 * eps)
            out.append((a if a is not None else zero) - self.unroll_lr * hvp)
        return loss, out

    def loss(self, inputs: Any, data_samples: Any = None) -> dict[str, torch.Tensor]:
        """Training: an alpha step on held-out data, then the weights' task loss; else the mixed supernet's loss."""
        if not self.training:
            return self.student_loss(inputs, data_samples)[0]
        if self._arch_iter is not None:
            held_out, train = split_batch(next(self._arch_iter)), (inputs, data_samples)
        else:
            if not isinstance(inputs, torch.Tensor) or inputs.shape[0] < 2:
                raise ConfigError("Darts without arch_batches splits each training batch in two halves (alpha, "
                                  "weights): give batches of at least 2 samples, or arch_batches=.")
            held_out = (_half(inputs, True), _half(data_samples, True))
            train = (_half(inputs, False), _half(data_samples, False))
        self.last_arch_loss = self.arch_step(train, held_out)
        return self.student_loss(*train)[0]

    def search_subnet(self) -> dict[str, dict[str, Any]]:
        """The argmax architecture ``{name: {"chosen": op}}`` (other mutables keep their current choice)."""
        return self.mutator.fix_subnet({**self.mutator.current_choices(),
                                        **{n: op.argmax_choice() for n, op in self.diff_ops.items()}})

    def export(self) -> nn.Module:
        """The plain module of the argmax architecture (each DiffMutableOP replaced by its chosen op)."""
        return export_subnet(self.architecture, self.search_subnet())


register_module(name="DARTS")(Darts)
