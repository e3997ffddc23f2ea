"""NNI 2.x's pruners that train or read data through the user's trainer.

``SlimPruner``, ``ActivationAPoZRankPruner``, ``ActivationMeanRankPruner``, ``TaylorFOWeightPruner``.

They take NNI 2.x's triple ``trainer(model, optimizer, criterion)`` (one epoch of the user's loop),
``traced_optimizer`` (``slimkit.trace(torch.optim.SGD)(model.parameters(), ...)``; a plain optimizer works too,
since slimkit's wrappers keep the layers' parameters) and ``criterion``. The optimizer is used only inside
:meth:`compress`; afterwards its ``step`` is restored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.activation_rank import ActivationAPoZRankFilterPruner, ActivationMeanRankFilterPruner
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.one_shot import SlimEngine
from slimkit.engines.pruning.taylor_fo import TaylorFOWeightFilterPruner
from slimkit.engines.pruning.training import check_positive_int
from slimkit.errors import check_number
from slimkit.faces.nni.v2.base import V2Masks, V2Pruner, call_trainer, check_mode, check_training_args
from slimkit.faces.nni.v2.legacy import legacy_slim_arguments
from slimkit.faces.nni.v3.evaluator import Evaluator
from slimkit.faces.nni.v3.utils import slim_norm_config

__all__ = ["ActivationAPoZRankPruner", "ActivationMeanRankPruner", "SlimPruner", "TaylorFOWeightPruner"]

_DATA_MODES = ("normal", "global", "dependency_aware")


def _no_evaluator(name: str, kwargs: Mapping[str, Any]) -> None:
    if "evaluator" in kwargs:
        raise PruningConfigError(f"{name}(evaluator=...) is NNI 2.9's newer form; slimkit takes the trainer form: "
                                 f"{name}(model, config_list, trainer, traced_optimizer, criterion, ...). NNI 3.0's "
                                 "evaluator form (a TorchEvaluator / TransformersEvaluator) is taken by SlimPruner, "
                                 "TaylorPruner and MovementPruner.")
    if kwargs:
        raise PruningConfigError(f"{name} got unexpected argument(s) {', '.join(sorted(kwargs))}.")


class SlimPruner(V2Pruner, SlimEngine):
    """Network Slimming (NNI 2.x and 3.0 signatures): train with an L1 penalty on BatchNorm scales, then prune.

    NNI 3.0: ``SlimPruner(model, config_list, evaluator, training_steps, regular_scale=1.0)``: :meth:`compress`
    trains ``training_steps`` steps of the evaluator's loop with ``loss + regular_scale * mean_l(|gamma_l|_1)``
    (the penalty patched into the loss, as NNI 3.0 does), then masks the channels with the smallest ``|gamma|``
    of each selected BatchNorm layer (ranked together across a ``global_group_id``). NNI 2.x:
    ``SlimPruner(model, config_list, trainer, traced_optimizer, criterion, training_epochs, scale=0.0001,
    mode="global")``: ``training_epochs`` epochs of ``trainer`` with ``criterion + scale * sum(|gamma|)``, then
    global ranking of ``total_sparsity`` (capped by ``max_sparsity_per_layer``) or per layer with ``"normal"``.
    slimkit's Slim prunes BatchNorm scales: select BatchNorm layers (``op_types: ["BatchNorm2d"]``); with NNI
    3.0's form, selected convs/linears stand for the BatchNorm layers after them (found by tracing the
    evaluator's ``dummy_input``: :func:`slimkit.faces.nni.v3.utils.slim_norm_config`).
    """

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], trainer: Callable[..., Any] = None,
                 traced_optimizer: Any = None, criterion: Callable[..., torch.Tensor] = None,
                 training_epochs: int = 1, scale: float = 0.0001, mode: str = "global", **kwargs: Any) -> None:
        given = kwargs.pop("evaluator", None)
        self.evaluator = given if given is not None else trainer
        if isinstance(self.evaluator, Evaluator):  # NNI 3.0: (evaluator, training_steps, regular_scale)
            steps = kwargs.pop("training_steps", traced_optimizer)
            scale = kwargs.pop("regular_scale", 1.0 if criterion is None else criterion)
            _no_evaluator("SlimPruner", kwargs)
            self.training_steps = check_positive_int("SlimPruner", "training_steps", steps)
            self.trainer = self.traced_optimizer = self.criterion = None
            self.training_epochs = 1
        else:
            self.evaluator = None
            trainer, traced_optimizer, training_epochs = legacy_slim_arguments(trainer, traced_optimizer,
                                                                               training_epochs, kwargs)
            _no_evaluator("SlimPruner", {**kwargs, **({"evaluator": given} if given is not None else {})})
            check_training_args("SlimPruner", trainer, traced_optimizer, criterion)
            check_mode("SlimPruner", mode, ("normal", "global"))
            self.training_epochs = check_positive_int("SlimPruner", "training_epochs", training_epochs)
            self.trainer, self.traced_optimizer, self.criterion = trainer, traced_optimizer, criterion
        check_number("SlimPruner scale", scale, 0, meaning="the L1 penalty weight", error=PruningConfigError)
        self.scale = scale
        v3 = self.evaluator is not None
        if v3 and isinstance(model, nn.Module) and not isinstance(config_list, (str, bytes, Mapping)):
            config_list = slim_norm_config(model, config_list, self.evaluator.get_dummy_input())
        super().__init__(model, self._v2_config(model, config_list, mode, v3), scope="layer")
        self._trained = False

    def _penalty(self) -> torch.Tensor:
        return sum(w.module.weight.abs().sum() for w in self.modules_wrapper)  # type: ignore[return-value]

    def _penalised(self, output: Any, target: Any) -> torch.Tensor:
        return self.criterion(output, target) + self.scale * self._penalty()

    def _train_v3(self, evaluator: Evaluator) -> None:
        layers = max(1, len(self.modules_wrapper))
        evaluator.train_bound(self.bound_model, self.training_steps,
                              loss_patch=lambda loss, batch: loss + self.scale * self._penalty() / layers)

    def compress(self) -> tuple[nn.Module, V2Masks]:  # type: ignore[override]
        """Train with the sparsity penalty (once), then compute the masks; return ``(model, masks)``."""
        if not self._trained:
            if self.evaluator is not None:
                self._train_v3(self.evaluator)
            for epoch in range(self.training_epochs if self.evaluator is None else 0):
                call_trainer(self.trainer, self.bound_model, self.traced_optimizer, self._penalised, epoch)
            self._trained = True
        return super().compress()


class _DataV2(V2Pruner):
    """NNI 2.x constructor of the data-ranked filter pruners."""

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], trainer: Callable[..., Any] = None,
                 traced_optimizer: Any = None, criterion: Callable[..., torch.Tensor] = None,
                 training_batches: int = 1, mode: str = "normal", dummy_input: Any = None, **extra: Any) -> None:
        name = type(self).__name__
        _no_evaluator(name, {k: v for k, v in extra.items() if k != "activation"})
        check_training_args(name, trainer, traced_optimizer, criterion)
        check_mode(name, mode, _DATA_MODES)
        batches = check_positive_int(name, "training_batches", training_batches)
        options = {"activation": extra["activation"]} if "activation" in extra else {}
        super().__init__(model, self._v2_config(model, config_list, mode),  # type: ignore[call-arg]
                         optimizer=traced_optimizer, trainer=partial(call_trainer, trainer), criterion=criterion,
                         statistics_batch_num=batches, dummy_input=dummy_input,
                         dependency_aware=mode == "dependency_aware", **options)


class _ActivationV2(_DataV2):
    """NNI 2.x constructor of the activation-ranked filter pruners (``activation`` added)."""

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], trainer: Callable[..., Any] = None,
                 traced_optimizer: Any = None, criterion: Callable[..., torch.Tensor] = None,
                 training_batches: int = 1, activation: str = "relu", mode: str = "normal",
                 dummy_input: Any = None, **kwargs: Any) -> None:
        super().__init__(model, config_list, trainer, traced_optimizer, criterion, training_batches, mode,
                         dummy_input, activation=activation, **kwargs)


class ActivationAPoZRankPruner(_ActivationV2, ActivationAPoZRankFilterPruner):
    """APoZ filter pruning with NNI 2.x's signature: drop the filters whose activations are most often zero.

    ``ActivationAPoZRankPruner(model, config_list, trainer, traced_optimizer, criterion, training_batches,
    activation="relu", mode="normal", dummy_input=None)``: :meth:`compress` runs one epoch of ``trainer`` and
    collects the activations of its first ``training_batches`` batches.
    """


class ActivationMeanRankPruner(_ActivationV2, ActivationMeanRankFilterPruner):
    """Mean-activation filter pruning with NNI 2.x's signature (see ActivationAPoZRankPruner)."""


class TaylorFOWeightPruner(_DataV2, TaylorFOWeightFilterPruner):
    """First-order Taylor filter pruning with NNI 2.x's signature.

    ``TaylorFOWeightPruner(model, config_list, trainer, traced_optimizer, criterion, training_batches,
    mode="normal", dummy_input=None)``: :meth:`compress` runs one epoch of ``trainer`` and accumulates
    ``(sum of weight * grad)^2`` per filter over its first ``training_batches`` optimizer steps.
    """
