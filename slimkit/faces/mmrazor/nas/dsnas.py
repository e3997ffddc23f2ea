"""DSNAS (Hu et al., CVPR 2020): search and train in one run, without retraining (MMRazor's ``DSNAS``).

The supernet's choices (:class:`~slimkit.engines.nas.OneHotMutableOP`) draw one candidate per forward from
``softmax(alpha)`` and scale its output by a one-hot leaf ``Z``. One backward of the task loss then gives the
weights their gradient (what :func:`slimkit.training.fit` steps) and ``dL/dZ``, the credit of the draw; alpha
follows DSNAS's estimator ``sum(dL/dZ) * grad_alpha log p(draw)`` with its own optimizer, stepped at the start of
the next training step (and by :meth:`DSNAS.arch_step`). Phases by epoch (``fit(..., on_epoch=algo.set_epoch)``):
before ``pretrain_epochs`` paths are drawn uniformly and alpha stays; from ``finetune_epochs`` on the argmax
architecture is fixed and only that subnet trains. ``search_subnet()`` / ``export()`` give the argmax subnet.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.engines.nas import NasMutator, OneHotMutableOP, export_subnet
from slimkit.errors import ConfigError, check_int
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.nas.darts import optimizer_cfg, torch_optimizer
from slimkit.faces.mmrazor.nas.spos import SPOS

log = logging.getLogger(__name__)


@register_module()
class DSNAS(SPOS):
    """DSNAS over an architecture with ``OneHotMutableOP`` choices (see the module doc).

    ``arch_optimizer``: alpha's optimizer config (a ``torch.optim`` type; default Adam 3e-4). ``flops_constraints``
    and ``estimator_cfg`` (MMRazor's FLOPs penalty) are accepted and not applied: a logged note says so; search
    the finished supernet under a FLOPs limit with :class:`~slimkit.engines.nas.EvolutionSearchLoop` instead.
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any],
                 mutator: NasMutator | Mapping[str, Any] | None = None, pretrain_epochs: int = 0,
                 finetune_epochs: int = 80, flops_constraints: float | None = None,
                 estimator_cfg: Mapping[str, Any] | None = None, arch_optimizer: Mapping[str, Any] | None = None,
                 norm_training: bool = False, data_preprocessor: Any = None,
                 init_cfg: Mapping[str, Any] | None = None) -> None:
        for name, value in (("pretrain_epochs", pretrain_epochs), ("finetune_epochs", finetune_epochs)):
            check_int(f"DSNAS: {name}", value, 0)
        if pretrain_epochs >= finetune_epochs:
            raise ConfigError(f"DSNAS: pretrain_epochs ({pretrain_epochs}) must be below finetune_epochs "
                              f"({finetune_epochs}): the search runs between them.")
        super().__init__(architecture, mutator, norm_training, data_preprocessor, init_cfg)
        self.ops = {n: m for n, m in self.mutator.mutables.items() if isinstance(m, OneHotMutableOP)}
        if not self.ops:
            raise ConfigError("DSNAS needs an architecture with OneHotMutableOP choices (mutable_cfg=dict("
                              "type='OneHotMutableOP', candidates=...)).")
        if flops_constraints is not None or estimator_cfg is not None:
            log.info("DSNAS: flops_constraints / estimator_cfg (the FLOPs penalty) are not applied; search the "
                     "trained supernet under constraints_range with EvolutionSearchLoop.")
        self.pretrain_epochs, self.finetune_epochs, self.epoch = pretrain_epochs, finetune_epochs, -1
        self.arch_optimizer_cfg = optimizer_cfg(arch_optimizer, "DSNAS")
        self._arch_opt: torch.optim.Optimizer | None = None
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Tell the algorithm the epoch (``fit(..., on_epoch=algo.set_epoch)``): it picks the phase."""
        self.arch_step()  # the last backward of the previous epoch counts in that epoch's phase
        self.epoch = int(epoch)
        for op in self.ops.values():
            op.uniform = self.epoch < self.pretrain_epochs
        if self.epoch >= self.finetune_epochs and not all(op.fixed for op in self.ops.values()):
            for op in self.ops.values():
                op.fix_argmax()

    def arch_step(self) -> bool:
        """Step alpha with the gradients of the latest backward (True when there were any)."""
        grads = [(op.arch_parameter(), op.arch_gradient()) for op in self.ops.values()]
        grads = [(alpha, g) for alpha, g in grads if g is not None]
        if not grads or not self.pretrain_epochs <= self.epoch < self.finetune_epochs:
            return False
        if self._arch_opt is None:
            self._arch_opt = torch_optimizer([a for a, _ in grads], self.arch_optimizer_cfg, "DSNAS")
        self._arch_opt.zero_grad()
        for alpha, grad in grads:
            alpha.grad = grad
        self._arch_opt.step()
        return True

    def loss(self, inputs: Any, data_samples: Any = None) -> dict[str, torch.Tensor]:
        """Training: step alpha from the previous backward, then the task loss of a freshly drawn path."""
        if self.training:
            self.arch_step()
        return self.student_loss(inputs, data_samples)[0]

    def search_subnet(self) -> dict[str, dict[str, Any]]:
        """The argmax architecture ``{name: {"chosen": op}}``."""
        return self.mutator.fix_subnet({**self.mutator.current_choices(),
                                        **{n: op.argmax_choice() for n, op in self.ops.items()}})

    def export(self) -> nn.Module:
        """The plain module of the argmax architecture."""
        return export_subnet(self.architecture, self.search_subnet())
