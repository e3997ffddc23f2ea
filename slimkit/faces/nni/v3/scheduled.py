"""NNI 3.0's scheduled pruning: a bound pruner's sparsity raised over rounds of training.

``LinearPruner(pruner, interval_steps, total_times, evaluator=None)`` and ``AGPPruner(...)`` run ``total_times``
rounds of ``interval_steps`` training steps.

:func:`run_schedule` is the loop the NNI 2.x/3.0 classes of :mod:`slimkit.faces.nni.v2.iterative` run with
NNI 3.0's arguments. Round ``t`` sets every layer (and every global group) to ``ratio(t)`` of its final sparsity,
lets the bound pruner compute its masks (a Taylor or Slim pruner first trains its ``training_steps`` through the
evaluator), then trains the rest of the interval with the masks applied. The engines' maskers rank pruned units
first, so masks only grow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.training import check_positive_int
from slimkit.faces.nni.v3.evaluator import Evaluator

__all__ = ["check_schedule_v3", "run_schedule"]


def check_schedule_v3(who: str, pruner: Any, interval_steps: Any, total_times: Any, evaluator: Any) -> Evaluator:
    """Check NNI 3.0's scheduled-pruner arguments; return the evaluator that trains between rounds."""
    for name, value in (("interval_steps", interval_steps), ("total_times", total_times)):
        check_positive_int(who, name, value)
    if getattr(pruner, "iterative", False):
        raise PruningConfigError(f"{who} schedules a one-shot pruner (LevelPruner, L1NormPruner, L2NormPruner, "
                                 f"FPGMPruner, SlimPruner, TaylorPruner); {type(pruner).__name__} already schedules "
                                 "its own sparsity.")
    chosen = evaluator if evaluator is not None else getattr(pruner, "evaluator", None)
    if not isinstance(chosen, Evaluator):
        raise PruningConfigError(f"{who} trains between rounds: pass evaluator= (a TorchEvaluator or "
                                 "TransformersEvaluator), or bind one to the pruner it schedules.")
    trains = getattr(pruner, "training_steps", None)
    if isinstance(trains, int) and trains > interval_steps:
        raise PruningConfigError(f"{who}: interval_steps={interval_steps} is shorter than the pruner's "
                                 f"training_steps={trains}; each round must fit the pruner's own training.")
    return chosen


def run_schedule(pruner: Any, ratio: Callable[[int], float], interval_steps: int, total_times: int,
                 evaluator: Evaluator, max_steps: int | None = None) -> tuple[nn.Module, Any]:
    """Run ``total_times`` rounds; return the pruner's ``compress()`` result of the last round."""
    if max_steps is not None and max_steps < interval_steps * total_times:
        raise PruningConfigError(f"compress(max_steps={max_steps}) is shorter than interval_steps * total_times = "
                                 f"{interval_steps * total_times}.")
    wrappers = pruner.get_modules_wrapper()
    final = {w.name: float(w.config["sparsity"]) for w in wrappers}
    groups = [(group, group.total_sparsity) for group in getattr(pruner, "_groups", [])]
    own_steps = getattr(pruner, "training_steps", None)
    own_steps = own_steps if isinstance(own_steps, int) else 0
    result: tuple[nn.Module, Any] = (pruner.bound_model, {})
    for round_index in range(1, total_times + 1):
        share = ratio(round_index)
        for wrapper in wrappers:
            wrapper.config["sparsity"] = min(share * final[wrapper.name], 0.99)
            wrapper.if_calculated = False
            if hasattr(wrapper, "contribution"):  # Taylor's statistics start again each round
                wrapper.contribution, wrapper.contribution_batches = None, 0
        for group, total in groups:
            group.total_sparsity = share * total
        pruner._allocated = False
        if hasattr(pruner, "_trained"):
            pruner._trained = False
        result = pruner.compress()
        rest = interval_steps - own_steps
        if rest > 0:
            evaluator.train_bound(pruner.bound_model, rest)
    return result
