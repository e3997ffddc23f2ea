"""Sensitivity pruner: per-layer sparsities read off a sensitivity analysis, raised step by step.

Each iteration runs :func:`~slimkit.engines.pruning.utils.sensitivity_analysis` on the current (already
pruned) model: every selected layer alone is pruned at 10%, 20%, ... and scored with the evaluator. A layer's
*tolerance* is the largest sparsity whose metric stays within ``acc_drop_threshold`` of the current model's;
the next allocation is proportional to the tolerances (``sparsity_proportion_calc`` may replace that rule) and
raises the overall sparsity by ``sparsity_per_iter``, never lowering a layer. The model is then fine-tuned
(``finetuner(model)``, optional) and the next iteration analyses it again, until the target is reached.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.allocation import Allocation, AllocationPruner, Evaluator, check_evaluator
from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.io import save_masks
from slimkit.engines.pruning.one_shot import FPGMEngine, L1FilterPruner, L2FilterPruner, LevelEngine
from slimkit.engines.pruning.training import check_fraction, check_positive
from slimkit.engines.pruning.utils import Sensitivity, sensitivity_analysis
from slimkit.evaluation.runtime import eval_mode

ProportionFn = Callable[[float, float, Sensitivity], Mapping[str, float]]
_ANALYSERS: dict[str, type[Pruner]] = {"l1": L1FilterPruner, "l2": L2FilterPruner, "fpgm": FPGMEngine,
                                       "level": LevelEngine}


def tolerances(baseline: float, threshold: float, sensitivities: Sensitivity) -> dict[str, float]:
    """Per layer, the largest analysed sparsity whose metric is at least ``baseline - threshold`` (else 0)."""
    return {layer: max([s for s, metric in row.items() if metric >= baseline - threshold], default=0.0)
            for layer, row in sensitivities.items()}


class SensitivityPruner(AllocationPruner):
    """Prune in steps, each layer in proportion to how much it tolerates (from a sensitivity analysis).

    ``SensitivityPruner(model, config_list, evaluator=None, finetuner=None, base_algo="l1",
    sparsity_proportion_calc=None, sparsity_per_iter=0.1, acc_drop_threshold=0.05, checkpoint_dir=None,
    optimize_mode="maximize")``. ``config_list`` gives the overall ``sparsity``; ``evaluator(model)`` the metric
    (higher is better unless ``optimize_mode="minimize"``; the threshold is in the metric's units);
    ``sparsity_proportion_calc(baseline, threshold, sensitivities) -> {layer: share}`` replaces the tolerance
    rule. With ``checkpoint_dir`` the masks after every iteration are saved there. ``sensitivities`` keeps the
    analysis of every iteration.
    """

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        evaluator: Evaluator | None = None,
        finetuner: Callable[..., Any] | None = None,
        base_algo: str = "l1",
        sparsity_proportion_calc: ProportionFn | None = None,
        sparsity_per_iter: float = 0.1,
        acc_drop_threshold: float = 0.05,
        checkpoint_dir: str | os.PathLike | None = None,
        optimize_mode: str = "maximize",
        experiment_data_dir: str | os.PathLike | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
    ) -> None:
        who = self.display_name()
        self.evaluator = check_evaluator(who, evaluator)
        for name, fn in (("finetuner", finetuner), ("sparsity_proportion_calc", sparsity_proportion_calc)):
            if fn is not None and not callable(fn):
                raise PruningConfigError(f"{who} {name} must be a function, got {type(fn).__name__}.")
        self.finetuner, self.proportion_fn = finetuner, sparsity_proportion_calc
        self.sparsity_per_iter = check_fraction(who, "sparsity_per_iter", sparsity_per_iter, 1e-6)
        self.acc_drop_threshold = check_positive(who, "acc_drop_threshold", acc_drop_threshold, zero=True)
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.sensitivities: list[Sensitivity] = []
        self._eval_call: tuple[Sequence[Any], Mapping[str, Any]] | None = None
        self._finetune_call: tuple[Sequence[Any], Mapping[str, Any]] | None = None
        self._init_allocation(model, base_algo, optimize_mode, experiment_data_dir)
        super().__init__(model, config_list, optimizer, dummy_input)

    def _metric(self, model: nn.Module) -> float:
        """The evaluator's value (higher is better) for ``model``, in eval mode without gradients."""
        with eval_mode(model), torch.no_grad():
            args, kwargs = self._eval_call or ((model,), {})
            value = float(self.evaluator(*args, **kwargs))
        return value if self.optimize_mode == "maximize" else -value

    def analyse(self) -> Sensitivity:
        """The sensitivity of every selected layer of the current model (its masks stay in place)."""
        grid = [round(0.1 * k, 2) for k in range(1, 10) if 0.1 * k <= max(self.cap(n) for n in self.layer_names)]
        for wrapper in self.modules_wrapper:
            wrapper.apply_masks_to_module()  # already pruned units are zeros: the analysis ranks them first
        self._unwrap_model()
        try:
            return sensitivity_analysis(self.bound_model, self._metric, grid, op_names=self.layer_names,
                                        pruner=_ANALYSERS[self.base_algo])
        finally:
            self._wrap_model()

    def search(self) -> Allocation:
        """Analyse, allocate the next step, fine-tune; repeat until the overall sparsity reaches the target."""
        self.check_reachable()
        current: Allocation = dict.fromkeys(self.layer_names, 0.0)
        iteration = 0
        while self.overall_sparsity(current) + 1e-9 < self.target_sparsity:
            iteration += 1
            baseline = self._metric(self.bound_model)
            sens = self.analyse()
            self.sensitivities.append(sens)
            shares = (self.proportion_fn or tolerances)(baseline, self.acc_drop_threshold, sens)
            goal = min(self.target_sparsity, self.overall_sparsity(current) + self.sparsity_per_iter)
            proposal = self.scale_to_target({n: float(shares.get(n, 0.0)) for n in self.layer_names}, goal)
            raised = self.snap({n: max(proposal[n], current[n]) for n in self.layer_names})
            if self.overall_sparsity(raised) <= self.overall_sparsity(current) + 1e-12:
                raised = self.scale_to_target({n: 1.0 for n in self.layer_names}, goal)  # nothing tolerated
                raised = self.snap({n: max(raised[n], current[n]) for n in self.layer_names})
            current = raised
            self.commit(current)
            if self.finetuner is not None:
                args, kwargs = self._finetune_call or ((self.bound_model,), {})
                self.finetuner(*args, **kwargs)
            self.best_score = self._metric(self.bound_model)
            self.record(current, self.best_score, iteration=iteration)
            if self.checkpoint_dir is not None:
                save_masks(self.get_masks(), self.checkpoint_dir / f"iteration_{iteration}_masks.safetensors")
        return current

    def compress(self, eval_args: Sequence[Any] | None = None, eval_kwargs: Mapping[str, Any] | None = None,
                 finetune_args: Sequence[Any] | None = None,
                 finetune_kwargs: Mapping[str, Any] | None = None) -> nn.Module:
        """Run the iterations; ``eval_args``/``finetune_args`` (and kwargs) are what evaluator/finetuner receive."""
        if eval_args is not None or eval_kwargs is not None:
            self._eval_call = (list(eval_args or ()), dict(eval_kwargs or {}))
        if finetune_args is not None or finetune_kwargs is not None:
            self._finetune_call = (list(finetune_args or ()), dict(finetune_kwargs or {}))
        return super().compress()
