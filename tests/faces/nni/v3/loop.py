"""Our own NNI-3.0-style user code for the digits: a ``training_func``, a ``training_step``, an evaluation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.faces.nni import trace
from slimkit.faces.nni.v3 import TorchEvaluator
from tests.faces.nni.digits import Batch, accuracy


def training_step(batch: Batch, model: nn.Module) -> torch.Tensor:
    """NNI 3.0's ``training_step(batch, model) -> loss``."""
    data, target = batch
    return nn.functional.cross_entropy(model(data), target)


def make_training_func(batches: Sequence[Batch], losses: list[float] | None = None) -> Callable[..., None]:
    """NNI 3.0's ``training_func(model, optimizers, training_step, lr_schedulers, max_steps, max_epochs)``.

    Appends each step's loss to ``losses`` so a test can count the steps and see the (patched) loss.
    """

    def training_func(model: nn.Module, optimizers: Any, step: Callable[..., torch.Tensor], lr_schedulers: Any,
                      max_steps: int | None, max_epochs: int | None) -> None:
        optimizer = optimizers[0] if isinstance(optimizers, list) else optimizers
        total = max_steps if max_steps else (max_epochs or 1) * len(batches)
        model.train()
        done = 0
        while done < total:
            for batch in batches:
                optimizer.zero_grad()
                loss = step(batch, model)
                loss.backward()
                optimizer.step()
                if losses is not None:
                    losses.append(float(loss.detach()))
                done += 1
                if done >= total:
                    break
            if lr_schedulers is not None:
                lr_schedulers.step()

    return training_func


def make_evaluator(model: nn.Module, digits: tuple[list[Batch], list[Batch]], lr: float = 0.01,
                   losses: list[float] | None = None, dummy_input: Any = None) -> TorchEvaluator:
    """A TorchEvaluator over ``model`` with a traced SGD, as NNI 3.0 scripts build it."""
    optimizer = trace(torch.optim.SGD)(model.parameters(), lr=lr, momentum=0.9)
    return TorchEvaluator(make_training_func(digits[0], losses), optimizer, training_step,
                          dummy_input=dummy_input, evaluating_func=lambda m: accuracy(m, digits[1]))


def layer_sparsity(mask: torch.Tensor) -> float:
    """The share of zeros in a mask."""
    return 1.0 - float(mask.count_nonzero()) / mask.numel()
