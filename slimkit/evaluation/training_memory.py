"""Peak memory of one training step's forward and backward (the memory a fine-tune of the model needs per batch)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from slimkit.errors import ModelNotSupportedError
from slimkit.evaluation.runtime import eval_mode, peak_bytes
from slimkit.utils import Inputs, main_tensor, run_model


@contextmanager
def _train_mode(model: nn.Module) -> Iterator[None]:
    with eval_mode(model):  # restores every submodule's flag on the way out
        model.train()
        yield


def _train_step(model: nn.Module, inputs: Inputs) -> None:
    with torch.enable_grad(), _train_mode(model):
        output = main_tensor(run_model(model, inputs))
        if not output.requires_grad:
            raise ModelNotSupportedError(
                f"training memory needs a model with trainable float weights; the output of {type(model).__name__} "
                "does not require grad (frozen or integer-only weights). Measure inference memory instead."
            )
        output.float().sum().backward()


def training_peak_memory(model: Any, inputs: Inputs) -> int:
    """Peak bytes in use during one training step on ``inputs``: weights + inputs + the forward/backward peak.

    The model runs in train mode with autograd on; the step's loss is the sum of the main output, so the backward
    pass allocates every gradient and frees the saved activations as a real loss would (optimizer state is not
    included: it depends on the optimizer). Measured like :func:`slimkit.evaluation.runtime.peak_memory`: the CUDA
    allocator's peak on CUDA, ``torch.profiler``'s allocation/free events on the CPU. Gradients are cleared before
    and after, so the model is left as it was found.
    """
    if not isinstance(model, nn.Module):
        raise ModelNotSupportedError(
            f"training memory needs a torch.nn.Module, got {type(model).__name__}; pass the model itself."
        )
    model.zero_grad(set_to_none=True)
    try:
        return peak_bytes(model, inputs, _train_step)
    finally:
        model.zero_grad(set_to_none=True)
