"""NNI 3.0's ``TaylorPruner``: first-order Taylor filter pruning with statistics from the evaluator's training.

The algorithm is slimkit's :class:`~slimkit.engines.pruning.taylor_fo.TaylorFOWeightFilterPruner` (the one
NNI 2.x's ``TaylorFOWeightPruner`` runs); this class gives it NNI 3.0's signature: the evaluator's own loop
trains ``training_steps`` steps, each optimizer step (relayed to the engine) adds ``(sum of weight * grad)^2``
per filter, and the masks follow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.taylor_fo import TaylorFOWeightFilterPruner
from slimkit.engines.pruning.training import check_positive_int
from slimkit.faces.nni.v2.base import V2Masks, V2Pruner
from slimkit.faces.nni.v3.evaluator import Evaluator, OptimizerRelay

__all__ = ["TaylorPruner"]


class TaylorPruner(V2Pruner, TaylorFOWeightFilterPruner):
    """``TaylorPruner(model, config_list, evaluator, training_steps)`` (NNI 3.0); ``compress() -> (model, masks)``.

    ``config_list`` takes NNI 3.0's keys (:mod:`slimkit.faces.nni.v3.config`); ``global_group_id`` ranks the
    filters of its layers together, ``dependency_group_id`` gives coupled layers one channel choice.
    """

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], evaluator: Evaluator,
                 training_steps: int) -> None:
        if not isinstance(evaluator, Evaluator):
            raise PruningConfigError(f"TaylorPruner needs an evaluator (TorchEvaluator, TransformersEvaluator) that "
                                     f"trains the model, got {type(evaluator).__name__}.")
        check_positive_int("TaylorPruner", "training_steps", training_steps)
        self.evaluator, self.training_steps, self._relay = evaluator, training_steps, OptimizerRelay()
        translated = self._v2_config(model, config_list, "normal", True, evaluator.get_dummy_input())
        super().__init__(model, translated, optimizer=self._relay, trainer=self._train_v3,
                         statistics_batch_num=training_steps, dummy_input=self.dependency_input,
                         dependency_aware=self.mode == "dependency_aware")

    def _train_v3(self, model: nn.Module, optimizer: Any = None, criterion: Any = None, epoch: int = 0) -> None:
        self.evaluator.train_bound(model, self.training_steps, relay=self._relay)  # type: ignore[union-attr]

    def compress(self) -> tuple[nn.Module, V2Masks]:
        """Train ``training_steps`` steps collecting the Taylor scores, then compute the masks."""
        self.patch_optimizer()  # again after an earlier compress() restored it (scheduled pruning)
        return super().compress()
