"""NetAdapt (Yang et al., 2018): shrink one layer per step, keep the proposal that hurts least after fine-tuning.

Each iteration lowers the resource (here: the selected layers' weights) by ``sparsity_per_iteration`` of the
total. For every layer that can still give that much it proposes pruning only that layer, briefly fine-tunes
the masked model from the iteration's starting weights (``short_term_fine_tuner(model)``), and scores it with
``evaluator(model)``. The best proposal (with its fine-tuned weights) becomes the next starting point, until
the overall sparsity reaches the target.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.allocation import Allocation, AllocationPruner, Evaluator, check_evaluator
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.training import check_fraction

FineTuner = Callable[[nn.Module], Any]


class NetAdaptPruner(AllocationPruner):
    """Greedy layer-by-layer pruning with short-term fine-tuning of every proposal (NetAdapt).

    ``NetAdaptPruner(model, config_list, short_term_fine_tuner=None, evaluator=None, optimize_mode="maximize",
    base_algo="l1", sparsity_per_iteration=0.05, experiment_data_dir=None)``. ``config_list`` gives the overall
    ``sparsity``; ``short_term_fine_tuner(model)`` trains the masked model briefly (optional: without it the
    proposals are compared as pruned); ``evaluator(model) -> metric`` scores them. The model keeps the weights of
    the winning proposals; fine-tune it longer afterwards.
    """

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        short_term_fine_tuner: FineTuner | None = None,
        evaluator: Evaluator | None = None,
        optimize_mode: str = "maximize",
        base_algo: str = "l1",
        sparsity_per_iteration: float = 0.05,
        experiment_data_dir: str | os.PathLike | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
    ) -> None:
        who = self.display_name()
        self.evaluator = check_evaluator(who, evaluator)
        if short_term_fine_tuner is not None and not callable(short_term_fine_tuner):
            raise PruningConfigError(f"{who} short_term_fine_tuner must be a function fine_tune(model), got "
                                     f"{type(short_term_fine_tuner).__name__}.")
        self.short_term_fine_tuner = short_term_fine_tuner
        self.sparsity_per_iteration = check_fraction(who, "sparsity_per_iteration", sparsity_per_iteration, 1e-6)
        self._init_allocation(model, base_algo, optimize_mode, experiment_data_dir)
        super().__init__(model, config_list, optimizer, dummy_input)

    def _proposal(self, current: Allocation, layer: str, pruned_weights: float) -> Allocation | None:
        """``current`` with only ``layer`` raised by ``pruned_weights`` more weights, or None if it cannot give them."""
        units = self.units(layer)
        size = self._wrapper(layer).weight_mask.numel()
        count = round(current[layer] * units) + max(1, math.ceil(pruned_weights / (size / units) - 1e-9))
        if count / units > self.cap(layer) + 1e-9:
            return None
        return {**current, layer: count / units}

    def search(self) -> Allocation:
        """Iterate until the target is reached; each iteration keeps the best single-layer proposal."""
        self.check_reachable()
        total = sum(w.weight_mask.numel() for w in self.modules_wrapper)
        current: Allocation = dict.fromkeys(self.layer_names, 0.0)
        iteration = 0
        while self.overall_sparsity(current) + 1e-9 < self.target_sparsity:
            iteration += 1
            goal = min(self.target_sparsity, self.overall_sparsity(current) + self.sparsity_per_iteration)
            need = (goal - self.overall_sparsity(current)) * total
            start = self.weights_snapshot()
            best: tuple[float, Allocation, dict[str, torch.Tensor]] | None = None
            for layer in self.layer_names:
                proposal = self._proposal(current, layer, need)
                if proposal is None:
                    continue
                self.restore_weights(start)
                self.apply_allocation(proposal)
                if self.short_term_fine_tuner is not None:
                    self.short_term_fine_tuner(self.bound_model)
                score = self.score(self.evaluator)
                self.record(proposal, score, iteration=iteration, layer=layer)
                if best is None or score > best[0]:
                    best = (score, proposal, self.weights_snapshot())
            if best is None:
                raise PruningConfigError(
                    f"NetAdaptPruner: no layer can give {need:.0f} more weights without passing its "
                    "max_sparsity_per_layer; lower sparsity_per_iteration or raise max_sparsity_per_layer.")
            self.best_score, current, weights = best
            self.restore_weights(weights)
            self.commit(current)
        return current
