"""Data for the data-driven smash pruners: statistics batches, the default loss, and a short training loop.

Batches come from ``cfg.data.train_dataloader()``. A batch is ``(inputs, targets)`` (what the built-in
classification and text collates give), a dict of model keyword inputs, or a tensor. The default loss is
cross-entropy between the model's main output (logits) and the targets; outputs with extra dims (token
logits ``[B, L, V]``) are flattened, and targets of -100 are ignored. Batches without targets fall back to
the model's own ``.loss`` (Hugging Face models fed ``labels``).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
import torch.nn.functional as F
from ConfigSpace import UniformIntegerHyperparameter
from torch import nn

from slimkit.compression.pruning import Pruner
from slimkit.compression.pruning.data_pruners import split_batch
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.errors import DataError
from slimkit.utils import main_tensor, model_device, move_inputs, run_model


def batch_hyperparameters(batches: int | None = 4, batch_size: int = 32) -> list:
    """``batches`` (how many train batches rank the filters; omitted when None) and ``batch_size``."""
    hps = [UniformIntegerHyperparameter("batch_size", 1, 4096, default_value=batch_size,
                                        meta={"desc": "Batch size of the train data loader."})]
    if batches is not None:
        hps.insert(0, UniformIntegerHyperparameter(
            "batches", 1, 100000, default_value=batches,
            meta={"desc": "Train batches the filter statistics are collected on (NNI's statistics_batch_num)."}))
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
    batches = []
    for batch in itertools.islice(loader, int(smash_config["batches"])):
        inputs, targets = split_batch(batch)
        batches.append((move_inputs(inputs, device), None if targets is None else targets.to(device)))
    if not batches:
        raise DataError(f"{name}: the train dataloader yielded no batch; add train data with cfg.add_data(...).")
    return batches


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of class logits ``[B, C]`` (or token logits ``[B, L, V]``) against integer targets."""
    if logits.dim() > 2:
        return F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten())
    return F.cross_entropy(logits.float(), targets)


def criterion_for(batches: list[tuple[Any, Any]]) -> Any:
    """Cross-entropy when the batches carry targets, else None (the model's own ``.loss`` is used)."""
    return cross_entropy if all(t is not None for _, t in batches) else None


def batch_loss(model: nn.Module, batch: Any, device: torch.device) -> torch.Tensor:
    """The default loss of one raw train batch (see the module docstring)."""
    inputs, targets = split_batch(batch)
    output = run_model(model, move_inputs(inputs, device))
    if targets is not None:
        return cross_entropy(main_tensor(output), targets.to(device))
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if not isinstance(loss, torch.Tensor):
        raise DataError("The train batches carry no targets and the model returns no .loss; give (inputs, targets) "
                        "batches, e.g. cfg.add_data('Digits') or a text dataset with a text_generation collate.")
    return loss


def train_loader(name: str, smash_config: SmashConfigPrefixWrapper) -> Any:
    """A shuffled train loader seeded with the ``seed`` hyperparameter."""
    generator = torch.Generator().manual_seed(int(smash_config["seed"]))
    return _require_data(name, smash_config).train_dataloader(batch_size=int(smash_config["batch_size"]),
                                                              shuffle=True, generator=generator)


def train(model: nn.Module, pruner: Pruner, loader: Any, epochs: int) -> tuple[int, float]:
    """Train ``model`` (wrapped by ``pruner``, whose optimizer steps update the masks); returns (steps, last loss).

    The model's train/eval mode is restored afterwards.
    """
    optimizer = pruner.optimizer
    device = model_device(model)
    was_training = model.training
    steps, last = 0, math.nan
    model.train()
    try:
        for epoch in range(epochs):
            pruner.update_epoch(epoch)
            for batch in loader:
                loss = batch_loss(model, batch, device)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                steps, last = steps + 1, float(loss.detach())
    finally:
        model.train(was_training)
    if steps == 0:
        raise DataError("The train dataloader yielded no batch; add train data with cfg.add_data(...).")
    return steps, last
