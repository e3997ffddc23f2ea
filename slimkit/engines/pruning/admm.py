"""ADMM pruning (Zhang et al., 2018): train toward a sparse copy of the weights, then prune hard.

Pruning is posed as ``min loss(W)`` subject to ``W`` lying in the sparse set ``S`` (each layer at its
sparsity, as the base masker counts it). ADMM splits it with an auxiliary ``Z`` (in ``S``) and a scaled dual
``U``, and alternates for ``num_iterations`` rounds:

1. W-step: train ``training_epochs`` epochs on ``loss(W) + row/2 * sum ||W - Z + U||^2`` (the augmented
   Lagrangian pulls the weights toward the sparse copy);
2. Z-step: ``Z = project_S(W + U)`` (keep the units the base masker ranks highest, zero the rest);
3. U-step: ``U = U + W - Z``.

Finally the weights are pruned to ``S`` for real (the base masker on the trained ``W``). With the filter
maskers (``l1``, ``l2``, ``fpgm``) the masks remove whole output channels, which ``ModelSpeedup`` cuts out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.allocation import use_base_algo
from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.training import Trainer, check_positive, check_positive_int, check_trainer, run_epoch


@torch.no_grad()
def project(pruner: Pruner, index: int, value: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Euclidean projection of ``value`` (a candidate weight of wrapper ``index``) onto its sparse set."""
    wrapper = pruner.modules_wrapper[index]
    weight = wrapper.module.weight
    saved = weight.detach().clone()
    weight.copy_(value)
    try:
        mask = pruner.masker.calc_mask(sparsity, wrapper, index)["weight_mask"]
    finally:
        weight.copy_(saved)
    return value * mask.to(value.dtype)


def admm_solve(pruner: Pruner, sparsities: Mapping[str, float], num_iterations: int, training_epochs: int,
               row: float, optimizer: torch.optim.Optimizer) -> list[float]:
    """Run the ADMM rounds on ``pruner``'s wrapped layers; returns ``||W - Z||`` after each round.

    Each W-step epoch trains with ``optimizer`` the way ``pruner`` was told to (its ``trainer`` or ``dataloader``,
    ``criterion`` and ``seed``: :func:`~slimkit.engines.pruning.training.run_epoch`), the augmented term added.
    The weights end close to their sparse projections; the caller installs the hard masks.
    """
    wrappers = pruner.modules_wrapper
    weights = [w.module.weight for w in wrappers]
    target = [float(sparsities[w.name]) for w in wrappers]
    z = [project(pruner, i, w.detach().clone(), target[i]) for i, w in enumerate(weights)]
    u = [torch.zeros_like(w) for w in weights]

    def penalty() -> torch.Tensor:
        return row / 2 * sum(((w - zi + ui) ** 2).sum() for w, zi, ui in zip(weights, z, u, strict=True))

    @torch.no_grad()
    def penalty_grad() -> None:
        for w, zi, ui in zip(weights, z, u, strict=True):
            if w.grad is not None:
                w.grad.add_(row * (w.detach() - zi + ui))

    residuals = []
    for _ in range(num_iterations):
        for epoch in range(training_epochs):
            run_epoch(pruner.bound_model, epoch, trainer=pruner.trainer, dataloader=pruner.dataloader,
                      optimizer=optimizer, criterion=pruner.criterion, penalty=penalty, penalty_grad=penalty_grad,
                      seed=pruner.seed)
        with torch.no_grad():
            for i, w in enumerate(weights):
                z[i] = project(pruner, i, w.detach() + u[i], target[i])
                u[i] = u[i] + w.detach() - z[i]
            residuals.append(float(sum((w.detach() - zi).norm() ** 2 for w, zi in zip(weights, z, strict=True))
                                   ** 0.5))
    return residuals


class ADMMEngine(Pruner):
    """Prune with ADMM: alternate training toward a sparse projection with the projection itself, then prune.

    ``ADMMPruner(model, config_list, trainer=None, num_iterations=30, training_epochs=5, row=1e-4,
    base_algo="l1", optimizer=None, criterion=None, dataloader=None, lr=1e-3)``. Each layer is pruned to its
    config ``sparsity``. Training: ``trainer(model, optimizer, criterion, epoch, callback)`` (Auptimizer / NNI
    1.x: call ``callback()`` between ``loss.backward()`` and ``optimizer.step()``; a trainer without
    ``callback`` gets the penalty inside ``criterion``) or ``dataloader=`` batches through slimkit's loop.
    ``optimizer`` defaults to Adam at ``lr`` over the model's parameters. After :meth:`compress`,
    ``residuals`` holds ``||W - Z||`` per round (it shrinks as the weights become sparse).
    """

    user_name = "ADMMPruner"  # NNI 1.x's name for it (slimkit.faces.nni.v1)

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        trainer: Trainer | None = None,
        num_iterations: int = 30,
        training_epochs: int = 5,
        row: float = 1e-4,
        base_algo: str = "l1",
        optimizer: torch.optim.Optimizer | None = None,
        criterion: Callable[..., torch.Tensor] | None = None,
        dataloader: Any = None,
        lr: float = 1e-3,
        dummy_input: Any = None,
        seed: int = 0,
    ) -> None:
        who = self.display_name()
        check_trainer(who, trainer, dataloader)
        self.num_iterations = check_positive_int(who, "num_iterations", num_iterations)
        self.training_epochs = check_positive_int(who, "training_epochs", training_epochs)
        self.row = check_positive(who, "row (the ADMM penalty rho)", row)
        use_base_algo(self, model, base_algo)
        check_positive(who, "lr", lr)
        self.trainer, self.criterion, self.dataloader, self.lr, self.seed = trainer, criterion, dataloader, lr, seed
        self.residuals: list[float] = []
        super().__init__(model, config_list, optimizer, dummy_input)

    def compress(self) -> nn.Module:
        """Run the ADMM rounds, then install the hard masks (once)."""
        if all(w.if_calculated for w in self.modules_wrapper):
            return self.bound_model
        optimizer = self.optimizer or torch.optim.Adam(self.bound_model.parameters(), lr=self.lr)
        sparsities = {w.name: float(w.config["sparsity"]) for w in self.modules_wrapper}
        self.residuals = admm_solve(self, sparsities, self.num_iterations, self.training_epochs, self.row, optimizer)
        return super().compress()
