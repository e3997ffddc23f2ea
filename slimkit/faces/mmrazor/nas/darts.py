"""DARTS (Liu, Simonyan & Yang, ICLR 2019): differentiable architecture search (MMRazor's ``Darts``).

The supernet's choices (:class:`~slimkit.engines.nas.DiffMutableOP`) mix their candidates by ``softmax(alpha)``,
and a DARTS cell's :class:`~slimkit.engines.nas.DiffChoiceRoute` mixes a node's input edges the same way (choices
sharing an ``alias`` -- every normal cell's ``normal_n2``, say -- share one alpha, as in MMRazor).
Each training step first updates the architecture parameters alpha on held-out data, then returns the task loss of
the weights on the training data (what :func:`slimkit.training.fit` steps its optimizer with; alpha is not among
the model's parameters). The alpha update is

* first order (``unroll=False``): ``grad_alpha L_val(w, alpha)``;
* second order (``unroll=True``, DARTS's bi-level approximation): ``grad_alpha L_val(w', alpha) - xi *
  (grad_alpha L_train(w+, alpha) - grad_alpha L_train(w-, alpha)) / (2 eps)`` with the virtual step
  ``w' = w - xi * grad_w L_train(w, alpha)``, ``w+- = w +- eps * grad_w' L_val(w', alpha)`` and
  ``eps = 0.01 / ||grad_w' L_val||`` (a finite-difference Hessian-vector product); ``xi`` is ``unroll_lr``
  (:func:`slimkit.engines.nas.darts_step.arch_gradients`).

Held-out data: the ``arch_batches`` you give (cycled), else the first half of each training batch (the second
half then trains the weights). :meth:`Darts.search_subnet` is the argmax architecture (each route's top
``num_chosen`` edges), :meth:`Darts.export` its plain module (only the chosen op of each choice and the kept edges
of each route are left: physically smaller).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from slimkit.data.batches import split_batch
from slimkit.engines.nas import ArchLogits, NasMutator, export_subnet
from slimkit.engines.nas.darts_step import arch_gradients
from slimkit.errors import ConfigError, check_number
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
        self.diff_ops: dict[str, Any] = {n: m for n, m in self.mutator.mutables.items() if isinstance(m, ArchLogits)}
        if not self.diff_ops:
            raise ConfigError("Darts needs an architecture with DiffMutableOP / DiffChoiceRoute choices (e.g. "
                              "mutable_cfg=dict(type='DiffMutableOP', candidates=...)); this one has only "
                              f"{sorted({type(m).__name__ for m in self.mutator.mutables.values()})}.")
        self.unroll, self.unroll_lr = bool(unroll), check_number("Darts: unroll_lr", unroll_lr, 0, open_low=True)
        self.arch_optimizer_cfg = optimizer_cfg(arch_optimizer, "Darts")
        self._arch_opt: torch.optim.Optimizer | None = None
        self._arch_iter: Iterator[Any] | None = None
        self.last_arch_loss = float("nan")  # the held-out loss of the latest alpha step
        self.set_arch_batches(arch_batches)
        self.arch_parameters()  # one alpha per alias group from the start

    def set_arch_batches(self, batches: Iterable[Any] | None) -> None:
        """Held-out batches for the architecture step (cycled); ``None``: half of each training batch."""
        self._arch_iter = None if batches is None else itertools.cycle(batches)

    def arch_parameters(self) -> list[torch.Tensor]:
        """The architecture logits, one tensor per alias group (routes and ops of one ``alias`` share theirs)."""
        out: dict[str, torch.Tensor] = {}
        for name, op in self.diff_ops.items():
            key = f"alias:{op.alias}" if getattr(op, "alias", None) is not None else name
            if key not in out:
                out[key] = op.arch_parameter()
            elif op.arch_param is not out[key]:
                if op.arch_param.shape != out[key].shape:
                    raise ConfigError(f"Darts: the choices sharing alias {op.alias!r} differ in size "
                                      f"({tuple(op.arch_param.shape)} vs {tuple(out[key].shape)}).")
                op.arch_param = out[key]  # tie: one alpha per alias, as MMRazor's mutator groups them
        return list(out.values())

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
        self.arch_parameters()  # re-tie alias groups (a device move unties them)
        for op in self.diff_ops.values():
            op.arch_grad = on

    def arch_step(self, train: tuple[Any, Any], held_out: tuple[Any, Any]) -> float:
        """One update of alpha (first or second order); returns the held-out loss."""
        opt, alphas = self.arch_optimizer(), self.arch_parameters()
        weights = [p for p in self.architecture.parameters() if p.requires_grad]
        loss, grads = arch_gradients(lambda: self._task(*train), lambda: self._task(*held_out), alphas, weights,
                                     self._set_arch_grad, self.unroll_lr if self.unroll else None)
        opt.zero_grad()
        for alpha, grad in zip(alphas, grads, strict=True):
            alpha.grad = grad.detach()
        opt.step()
        return float(loss.detach())

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
        """The argmax architecture ``{name: {"chosen": op or kept edges}}`` (other mutables keep their choice)."""
        return self.mutator.fix_subnet({**self.mutator.current_choices(),
                                        **{n: op.argmax_choice() for n, op in self.diff_ops.items()}})

    def export(self) -> nn.Module:
        """The plain module of the argmax architecture (ops by their chosen candidate, routes by their kept edges)."""
        return export_subnet(self.architecture, self.search_subnet())


register_module(name="DARTS")(Darts)
