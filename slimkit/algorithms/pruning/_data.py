"""Data for the data-driven smash pruners: hyperparameters, statistics batches, seeded train loader, bases.

Batches come from ``cfg.data.train_dataloader()`` and are read with :func:`slimkit.data.split_batch`; the
loss is :mod:`slimkit.training`'s default (cross-entropy on the targets, token logits flattened, -100
ignored; the model's own ``.loss`` for batches without targets), and training runs through
:func:`slimkit.training.fit`.
"""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import torch
from torch import nn

from slimkit.algorithms.pruning._framework import FrameworkPruner
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import choice, integer
from slimkit.data import move_batch, split_batch
from slimkit.engines.pruning import Pruner
from slimkit.errors import DataError
from slimkit.training import Criterion, cross_entropy
from slimkit.utils import model_device


def batch_hyperparameters(batches: int | None = 4, batch_size: int = 32) -> list:
    """``batches`` (how many train batches rank the filters; omitted when None) and ``batch_size``."""
    hps = [integer("batch_size", 1, 4096, batch_size, "Batch size of the train data loader.")]
    if batches is not None:
        hps.insert(0, integer("batches", 1, 100000, batches, "Train batches the filter statistics are collected on "
                              "(NNI's statistics_batch_num)."))
    return hps


def _require_data(name: str, smash_config: SmashConfigPrefixWrapper) -> Any:
    if smash_config.data is None:
        raise DataError(f"{name} ranks filters with data; add some with cfg.add_data(...) before smash().")
    return smash_config.data


def statistics_batches(name: str, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> list[tuple[Any, Any]]:
    """The first ``batches`` train batches (in order, on the model's device) as ``(inputs, targets)``."""
    loader = _require_data(name, smash_config).train_dataloader(batch_size=int(smash_config["batch_size"]),
                                                                shuffle=False)
    device = model_device(model)
    batches = [split_batch(move_batch(b, device)) for b in itertools.islice(loader, int(smash_config["batches"]))]
    if not batches:
        raise DataError(f"{name}: the train dataloader yielded no batch; add train data with cfg.add_data(...).")
    return batches


def criterion_for(batches: list[tuple[Any, Any]]) -> Criterion | None:
    """Cross-entropy when the batches carry targets, else None (the model's own ``.loss`` is used)."""
    return cross_entropy if all(t is not None for _, t in batches) else None


def train_loader(name: str, smash_config: SmashConfigPrefixWrapper) -> Any:
    """A shuffled train loader seeded with the ``seed`` hyperparameter."""
    generator = torch.Generator().manual_seed(int(smash_config["seed"]))
    return _require_data(name, smash_config).train_dataloader(batch_size=int(smash_config["batch_size"]),
                                                              shuffle=True, generator=generator)


class StatisticsPruner(FrameworkPruner):
    """Rank filters on statistics of ``batches`` train batches, forward passes only (not registered)."""

    dataset_required: ClassVar[bool] = True

    def extra_hyperparameters(self) -> list:
        """Number of batches and batch size."""
        return batch_hyperparameters()

    def build_pruner(self, model: nn.Module, config_list: list, smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """The engine fed the first train batches (the criterion is the loss Taylor's gradients come from)."""
        batches = statistics_batches(self.algorithm_name, model, smash_config)
        return self.engine(model, config_list, dataloader=batches, statistics_batch_num=len(batches),
                           criterion=criterion_for(batches), **self.engine_kwargs(smash_config))


class ActivationRankPruner(StatisticsPruner):
    """Rank filters by statistics of their activations (APoZ, mean activation; not registered)."""

    engine_args = ("activation",)

    def extra_hyperparameters(self) -> list:
        """Activation applied to the layer outputs, number of batches, batch size."""
        return [choice("activation", ["relu", "relu6"], "relu", "Activation applied to each layer's output before "
                       "the statistics are taken."), *batch_hyperparameters()]
