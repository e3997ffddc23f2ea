"""AutoCompress (Liu et al., 2020): simulated annealing picks per-layer sparsities, ADMM prunes toward them.

The overall target is reached in ``num_iterations`` rounds; after round ``k`` the selected layers are at
``1 - (1 - target)^(k / num_iterations)`` (each round removes the same share of what is left). A round:

1. simulated annealing (:func:`~slimkit.engines.pruning.simulated_annealing.anneal`) searches the
   allocation for the round's goal on the current model, scored by ``evaluator(model)``; no layer goes below
   what earlier rounds pruned;
2. ADMM (:func:`~slimkit.engines.pruning.admm.admm_solve`) trains the model toward that allocation for
   ``admm_num_iterations`` rounds of ``admm_training_epochs`` epochs;
3. the allocation is pruned hard (masks installed, pruned weights zeroed).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.admm import admm_solve
from slimkit.engines.pruning.allocation import Allocation, AllocationPruner, Evaluator, check_evaluator
from slimkit.engines.pruning.simulated_annealing import anneal, check_annealing
from slimkit.engines.pruning.training import Trainer, check_positive, check_positive_int, check_trainer


class AutoCompressEngine(AllocationPruner):
    """Rounds of annealing-based sparsity allocation followed by ADMM pruning (AutoCompress).

    ``AutoCompressPruner(model, config_list, trainer=None, evaluator=None, dummy_input=None, num_iterations=3,
    optimize_mode="maximize", base_algo="l1", start_temperature=100, stop_temperature=20, cool_down_rate=0.9,
    perturbation_magnitude=0.35, admm_num_iterations=30, admm_training_epochs=5, row=1e-4,
    experiment_data_dir=None, optimizer=None, criterion=None, dataloader=None, lr=1e-3)``. ``config_list`` gives
    the overall ``sparsity``; training as :class:`~slimkit.engines.pruning.admm.ADMMPruner`
    (``trainer(model, optimizer, criterion, epoch, callback)`` or ``dataloader=``).
    """

    user_name = "AutoCompressPruner"  # NNI 1.x's name for it (slimkit.faces.nni.v1)

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        trainer: Trainer | None = None,
        evaluator: Evaluator | None = None,
        dummy_input: Any = None,
        num_iterations: int = 3,
        optimize_mode: str = "maximize",
        base_algo: str = "l1",
        start_temperature: float = 100.0,
        stop_temperature: float = 20.0,
        cool_down_rate: float = 0.9,
        perturbation_magnitude: float = 0.35,
        admm_num_iterations: int = 30,
        admm_training_epochs: int = 5,
        row: float = 1e-4,
        experiment_data_dir: str | os.PathLike | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        criterion: Callable[..., torch.Tensor] | None = None,
        dataloader: Any = None,
        lr: float = 1e-3,
        seed: int = 0,
    ) -> None:
        who = self.display_name()
        self.evaluator = check_evaluator(who, evaluator)
        check_trainer(who, trainer, dataloader)
        self.anneal_args = check_annealing(who, start_temperature, stop_temperature, cool_down_rate,
                                           perturbation_magnitude)
        self.num_iterations = check_positive_int(who, "num_iterations", num_iterations)
        self.admm_num_iterations = check_positive_int(who, "admm_num_iterations", admm_num_iterations)
        self.admm_training_epochs = check_positive_int(who, "admm_training_epochs", admm_training_epochs)
        self.row = check_positive(who, "row (the ADMM penalty rho)", row)
        check_positive(who, "lr", lr)
        self.trainer, self.criterion, self.dataloader, self.lr, self.seed = trainer, criterion, dataloader, lr, seed
        self.residuals: list[list[float]] = []
        self._init_allocation(model, base_algo, optimize_mode, experiment_data_dir)
        super().__init__(model, config_list, optimizer, dummy_input)

    def round_goal(self, k: int) -> float:
        """Overall sparsity after round ``k`` (1-based): the same share of the remaining weights goes each round."""
        return 1.0 - (1.0 - self.target_sparsity) ** (k / self.num_iterations)

    def search(self) -> Allocation:
        """The rounds: anneal, ADMM toward the allocation, prune hard; returns the last allocation."""
        self.check_reachable()
        rng = random.Random(self.seed)
        optimizer = self.optimizer or torch.optim.Adam(self.bound_model.parameters(), lr=self.lr)
        current: Allocation = dict.fromkeys(self.layer_names, 0.0)
        for k in range(1, self.num_iterations + 1):
            goal = self.round_goal(k) if k < self.num_iterations else self.target_sparsity
            found, self.best_score = anneal(self, self.evaluator, goal, rng=rng, start=current, **self.anneal_args)
            chosen = self.snap({n: max(found[n], current[n]) for n in self.layer_names})
            self.apply_allocation(current)  # train with what is already pruned, toward what is chosen
            self.residuals.append(admm_solve(self, chosen, self.admm_num_iterations, self.admm_training_epochs,
                                             self.row, optimizer))
            current = chosen
            self.commit(current)
        return current
