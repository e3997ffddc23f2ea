"""NNI 2.x's pruners that prune while the model trains: ``ADMMPruner`` and ``MovementPruner``.

Each is slimkit's engine (:class:`~slimkit.engines.pruning.admm.ADMMEngine`,
:class:`~slimkit.engines.pruning.movement.MovementEngine`, the algorithms the ``admm`` and ``movement``
registry entries run) behind NNI 2.x's constructor: the user's ``trainer(model, optimizer, criterion)`` runs each
epoch, ``traced_optimizer`` is the optimizer it steps (used only inside ``compress()``), and ``compress()``
returns ``(model, masks)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.admm import ADMMEngine
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.movement import MovementEngine
from slimkit.faces.nni.v2.base import V2Masks, V2Pruner, call_trainer, check_training_args
from slimkit.faces.nni.v3.evaluator import Evaluator, OptimizerRelay

__all__ = ["ADMMPruner", "MovementPruner"]


class ADMMPruner(V2Pruner, ADMMEngine):
    """ADMM pruning with NNI 2.x's signature, run by slimkit's ``admm`` engine.

    ``ADMMPruner(model, config_list, trainer, traced_optimizer, criterion, iterations, training_epochs,
    granularity="fine-grained")``: ``iterations`` rounds of ``training_epochs`` epochs, each pulling the weights
    towards their sparse projection; ``"fine-grained"`` prunes single weights, ``"coarse-grained"`` filters.
    """

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], trainer: Callable[..., Any] = None,
                 traced_optimizer: Any = None, criterion: Callable[..., torch.Tensor] = None, iterations: int = 30,
                 training_epochs: int = 5, granularity: str = "fine-grained") -> None:
        check_training_args("ADMMPruner", trainer, traced_optimizer, criterion)
        if granularity not in ("fine-grained", "coarse-grained"):
            raise PruningConfigError(f"ADMMPruner granularity must be 'fine-grained' or 'coarse-grained', got "
                                     f"{granularity!r}.")
        super().__init__(model, self._v2_config(model, config_list, "normal"),  # type: ignore[call-arg]
                         trainer=partial(call_trainer, trainer), num_iterations=iterations,
                         training_epochs=training_epochs, optimizer=traced_optimizer, criterion=criterion,
                         base_algo="level" if granularity == "fine-grained" else "l1")


class MovementPruner(V2Pruner, MovementEngine):
    """Movement pruning (NNI 2.x and 3.0 signatures), run by slimkit's ``movement`` engine.

    NNI 3.0: ``MovementPruner(model, config_list, evaluator, warmup_step, cooldown_begin_step,
    regular_scale=1.0)`` then ``compress(max_steps, max_epochs)``: the evaluator's loop trains, each optimizer
    step (relayed to the engine) moves the scores and masks, the sparsity rising between the two steps
    (``granularity: "out_channel"`` prunes whole output channels, else single weights). slimkit's
    engine learns plain movement scores (no L1 penalty on them), so ``regular_scale`` is recorded, not used.
    NNI 2.x: ``MovementPruner(model, config_list, trainer, traced_optimizer, criterion, training_epochs,
    warm_up_step, cool_down_beginning_step)``: weights whose score (learned from ``-weight * grad`` while
    fine-tuning) is lowest are pruned.
    """

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], trainer: Callable[..., Any] = None,
                 traced_optimizer: Any = None, criterion: Callable[..., torch.Tensor] = None,
                 training_epochs: int = 1, warm_up_step: int = 0, cool_down_beginning_step: int | None = None,
                 **v3_kwargs: Any) -> None:
        evaluator = v3_kwargs.pop("evaluator", trainer)
        if not isinstance(evaluator, Evaluator):
            if v3_kwargs:
                raise PruningConfigError(f"MovementPruner got unexpected argument(s) {', '.join(sorted(v3_kwargs))}; "
                                         "NNI 3.0's form is MovementPruner(model, config_list, evaluator, warmup_step, "
                                         "cooldown_begin_step) with a TorchEvaluator / TransformersEvaluator.")
            check_training_args("MovementPruner", trainer, traced_optimizer, criterion)
            super().__init__(model, self._v2_config(model, config_list, "normal"),  # type: ignore[call-arg]
                             trainer=partial(call_trainer, trainer), traced_optimizer=traced_optimizer,
                             criterion=criterion, training_epochs=training_epochs, warm_up_step=warm_up_step,
                             cool_down_beginning_step=cool_down_beginning_step)
            return
        # NNI 3.0: (evaluator, warmup_step, cooldown_begin_step, regular_scale)
        warmup = v3_kwargs.pop("warmup_step", traced_optimizer)
        cooldown = v3_kwargs.pop("cooldown_begin_step", criterion)
        self.regular_scale = v3_kwargs.pop("regular_scale", training_epochs)  # 3.0's 6th argument, default 1
        if v3_kwargs:
            raise PruningConfigError(f"MovementPruner got unexpected argument(s) {', '.join(sorted(v3_kwargs))}.")
        if warmup is None or cooldown is None:
            raise PruningConfigError("MovementPruner(model, config_list, evaluator, warmup_step, cooldown_begin_step) "
                                     "needs both steps: scores warm up until warmup_step, the final sparsity is "
                                     "reached at cooldown_begin_step.")
        self.evaluator, self._relay = evaluator, OptimizerRelay()
        translated = self._v2_config(model, config_list, "normal", True)
        super().__init__(model, translated, trainer=self._train_v3,  # type: ignore[call-arg]
                         traced_optimizer=self._relay, training_steps=cooldown, warm_up_step=warmup,
                         cool_down_beginning_step=cooldown, granularity="filter" if self.out_channel else "fine")

    def _train_v3(self, model: nn.Module, optimizer: Any = None, criterion: Any = None, epoch: int = 0) -> None:
        """One call of the engine's loop: the evaluator trains the remaining steps (or one epoch)."""
        evaluator = self.evaluator
        assert evaluator is not None
        remaining = None if self.training_steps is None else self.training_steps - self.step_count
        evaluator.train_bound(model, remaining, None if remaining else 1, relay=self._relay)

    def compress(self, max_steps: int | None = None, max_epochs: int | None = None  # type: ignore[override]
                 ) -> tuple[nn.Module, V2Masks]:
        """Train and prune; NNI 3.0 takes the duration here (``max_steps >= cooldown_begin_step``, or epochs)."""
        if self.evaluator is not None:
            if max_steps is None and max_epochs is None:
                raise PruningConfigError("MovementPruner.compress(max_steps, max_epochs) needs a training duration "
                                         "with an evaluator; e.g. compress(max_steps=1000, max_epochs=None).")
            if max_steps is not None and max_steps < self.cool_down_beginning_step:
                raise PruningConfigError(f"MovementPruner.compress: max_steps={max_steps} ends before "
                                         f"cooldown_begin_step={self.cool_down_beginning_step}.")
            self.training_steps, self.training_epochs = max_steps, max_epochs
            self.patch_optimizer()
        return super().compress()
