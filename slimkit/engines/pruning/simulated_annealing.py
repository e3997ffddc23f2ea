"""Simulated annealing over per-layer sparsities (the search NNI's SimulatedAnnealing and AutoCompress use).

The state is an allocation whose overall sparsity is the target. Each step perturbs every layer's share by
a uniform random amount (``perturbation_magnitude``, shrinking with the temperature), rescales the result
back onto the target, and scores it with the evaluator on the masked model. A better candidate is always
taken; a worse one with probability ``exp(-drop / T)``, where ``drop`` is the metric's fall counted in
hundredths (percentage points of accuracy). The temperature starts at ``start_temperature`` and is multiplied
by ``cool_down_rate`` after each step until it falls below ``stop_temperature``; the best candidate seen wins.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.allocation import Allocation, AllocationPruner, Evaluator, check_evaluator
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.training import check_fraction, check_positive


def check_annealing(who: str, start_temperature: Any, stop_temperature: Any, cool_down_rate: Any,
                    perturbation_magnitude: Any) -> dict[str, float]:
    """Validate the annealing schedule (clear errors naming the argument); returns it as :func:`anneal`'s keywords."""
    for name, value in (("start_temperature", start_temperature), ("stop_temperature", stop_temperature)):
        check_positive(who, name, value)
    if not start_temperature > stop_temperature:
        raise PruningConfigError(f"{who} start_temperature ({start_temperature}) must be above stop_temperature "
                                 f"({stop_temperature}); the search runs while the temperature cools between them.")
    check_fraction(who, "cool_down_rate", cool_down_rate, 1e-6, 1.0)
    check_fraction(who, "perturbation_magnitude", perturbation_magnitude, 1e-6, 1.0, closed_high=True)
    return {"start_temperature": float(start_temperature), "stop_temperature": float(stop_temperature),
            "cool_down_rate": float(cool_down_rate), "perturbation_magnitude": float(perturbation_magnitude)}


def anneal(pruner: AllocationPruner, evaluator: Evaluator, target: float, *, start_temperature: float,
           stop_temperature: float, cool_down_rate: float, perturbation_magnitude: float,
           rng: random.Random, start: Mapping[str, float] | None = None) -> tuple[Allocation, float]:
    """Search ``pruner``'s allocations at overall sparsity ``target``; return the best one and its score.

    Candidates are installed as masks and scored with ``pruner.score(evaluator)`` (every one is recorded in
    ``pruner.history``). ``start`` is the first state (default: every layer at the target).
    """
    names = pruner.layer_names
    current = pruner.scale_to_target(start or dict.fromkeys(names, 1.0), target)
    pruner.apply_allocation(current)
    current_score = pruner.score(evaluator)
    pruner.record(current, current_score, temperature=start_temperature)
    best, best_score = current, current_score
    temperature = float(start_temperature)
    while temperature > stop_temperature:
        magnitude = perturbation_magnitude * temperature / start_temperature
        shares = {n: max(current[n] + rng.uniform(-magnitude, magnitude), 0.0) for n in names}
        candidate = pruner.scale_to_target(shares, target)
        pruner.apply_allocation(candidate)
        score = pruner.score(evaluator)
        pruner.record(candidate, score, temperature=round(temperature, 6))
        drop = (current_score - score) * 100.0
        if drop <= 0 or rng.random() < math.exp(-drop / temperature):
            current, current_score = candidate, score
        if score > best_score:
            best, best_score = candidate, score
        temperature *= cool_down_rate
    return best, best_score


class SimulatedAnnealingEngine(AllocationPruner):
    """Find per-layer sparsities for one overall target by simulated annealing (Kirkpatrick et al., 1983).

    ``SimulatedAnnealingPruner(model, config_list, evaluator, optimize_mode="maximize", base_algo="l1",
    start_temperature=100, stop_temperature=20, cool_down_rate=0.9, perturbation_magnitude=0.35,
    experiment_data_dir=None, seed=0)``. ``config_list`` gives the overall ``sparsity`` of the selected layers;
    ``evaluator(model) -> metric`` scores each candidate on the masked model (no training). The masks of the
    best candidate are installed by :meth:`compress`; ``history`` lists every candidate.
    """

    user_name = "SimulatedAnnealingPruner"  # NNI 1.x's name for it (slimkit.faces.nni.v1)

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        evaluator: Evaluator | None = None,
        optimize_mode: str = "maximize",
        base_algo: str = "l1",
        start_temperature: float = 100.0,
        stop_temperature: float = 20.0,
        cool_down_rate: float = 0.9,
        perturbation_magnitude: float = 0.35,
        experiment_data_dir: str | os.PathLike | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
        seed: int = 0,
    ) -> None:
        who = self.display_name()
        self.evaluator = check_evaluator(who, evaluator)
        self.anneal_args = check_annealing(who, start_temperature, stop_temperature, cool_down_rate,
                                           perturbation_magnitude)
        self.seed = seed
        self._init_allocation(model, base_algo, optimize_mode, experiment_data_dir)
        super().__init__(model, config_list, optimizer, dummy_input)

    def search(self) -> Allocation:
        """Anneal from the uniform allocation; return the best allocation seen."""
        self.check_reachable()
        best, self.best_score = anneal(self, self.evaluator, self.target_sparsity, rng=random.Random(self.seed),
                                       **self.anneal_args)
        return best
