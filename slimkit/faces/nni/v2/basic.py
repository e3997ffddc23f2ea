"""NNI 2.x's one-shot pruners that need only the weights.

``LevelPruner``, ``L1NormPruner``, ``L2NormPruner``, ``FPGMPruner``.

``pruner = L1NormPruner(model, config_list)``; ``_, masks = pruner.compress()``; ``pruner._unwrap_model()``;
``ModelSpeedup(model, dummy_input, masks).speedup_model()`` then removes the pruned channels for real.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.one_shot import FPGMEngine, L1FilterPruner, L2FilterPruner, LevelEngine
from slimkit.faces.nni.v2.base import V2Pruner, check_mode
from slimkit.faces.nni.v3.evaluator import Evaluator

__all__ = ["FPGMPruner", "L1NormPruner", "L2NormPruner", "LevelPruner"]

_FILTER_MODES = ("normal", "dependency_aware")


def _evaluator_slot(mode: Any, evaluator: Evaluator | None) -> tuple[Any, Evaluator | None]:
    """NNI 3.0 passes an evaluator where NNI 2.x passes ``mode``: return ``(mode, evaluator)``."""
    if isinstance(mode, Evaluator):
        return "normal", mode
    if evaluator is not None and not isinstance(evaluator, Evaluator):
        raise PruningConfigError(f"evaluator must be an NNI 3.0 evaluator (TorchEvaluator, TransformersEvaluator), "
                                 f"got {type(evaluator).__name__}.")
    return mode, evaluator


class LevelPruner(V2Pruner, LevelEngine):
    """Unstructured magnitude pruning (NNI 2.x and 3.0 signatures): zero each selected layer's smallest weights.

    NNI 2.x: ``LevelPruner(model, config_list, mode="normal", balance_gran=None)``; NNI 3.0:
    ``LevelPruner(model, config_list, evaluator=None)`` with 3.0's keys (``sparse_ratio``, ``op_names_re``,
    ``global_group_id``, ...: :mod:`slimkit.faces.nni.v3.config`), read as 3.0's whenever the list uses them.
    NNI 2.x's ``config_list`` takes ``sparsity``/``sparsity_per_layer``, ``total_sparsity``, ``op_types``,
    ``op_names``, ``op_partial_names``, ``exclude``. NNI's ``mode="balance"`` (block-balanced sparsity for
    sparse kernels) is not offered: it only pays off with kernels slimkit does not ship.
    """

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]],
                 mode: str | Evaluator = "normal", balance_gran: list[int] | None = None,
                 evaluator: Evaluator | None = None) -> None:
        mode, self.evaluator = _evaluator_slot(mode, evaluator)
        if mode == "balance" or balance_gran is not None:
            raise PruningConfigError("LevelPruner(mode='balance', balance_gran=...) is not supported: block-balanced "
                                     "sparsity needs sparse kernels slimkit does not ship. Use mode='normal' (plain "
                                     "magnitude pruning) or a filter pruner such as L1NormPruner for real speed.")
        check_mode("LevelPruner", mode, ("normal",))
        translated = self._v2_config(model, config_list, mode, self.evaluator is not None)
        if self.out_channel:
            raise PruningConfigError("LevelPruner prunes single weights; granularity 'out_channel' prunes whole "
                                     "channels: use L1NormPruner (or 'granularity': 'default').")
        super().__init__(model, translated)


class _NormPruner(V2Pruner):
    """Shared constructor of the weight-norm filter pruners: ``(model, config_list, mode, dummy_input)``."""

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]],
                 mode: str | Evaluator = "normal", dummy_input: Any = None,
                 evaluator: Evaluator | None = None) -> None:
        mode, self.evaluator = _evaluator_slot(mode, evaluator)
        check_mode(type(self).__name__, mode, _FILTER_MODES)
        given = dummy_input if dummy_input is not None else self.evaluator and self.evaluator.get_dummy_input()
        translated = self._v2_config(model, config_list, mode, self.evaluator is not None, given)
        super().__init__(model, translated, dependency_aware=self.mode == "dependency_aware",  # type: ignore[call-arg]
                         dummy_input=self.dependency_input)


class L1NormPruner(_NormPruner, L1FilterPruner):
    """Filter pruning by the L1 norm of each output channel's weights (NNI 2.x and 3.0 signatures).

    NNI 3.0: ``L1NormPruner(model, config_list, evaluator=None)`` with 3.0's keys (``sparse_ratio``,
    ``global_group_id``, ``dependency_group_id``, ...: :mod:`slimkit.faces.nni.v3.config`), read as 3.0's
    whenever an evaluator is passed or the list uses them. NNI 2.x:
    ``L1NormPruner(model, config_list, mode="normal", dummy_input=None)``; ``mode="dependency_aware"`` (with
    ``dummy_input``) gives coupled layers (residual adds, depthwise convs) one shared channel choice so the
    speedup removes them all.
    """


class L2NormPruner(_NormPruner, L2FilterPruner):
    """Filter pruning by the L2 norm of each output channel's weights (NNI 2.x and 3.0 signatures; see L1NormPruner)."""


class FPGMPruner(_NormPruner, FPGMEngine):
    """Filter pruning by geometric median: drop the most replaceable filters.

    NNI 2.x and 3.0 signatures, as :class:`L1NormPruner`.
    """
