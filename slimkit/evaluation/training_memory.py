"""Peak memory of one training step's forward and backward (the memory a fine-tune of the model needs per batch)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from slimkit.errors import ModelNotSupportedError
from slimkit.evaluation.runtime import _cpu_peak_from_profile, _input_bytes, eval_mode
from slimkit.evaluation.size import state_bytes
from slimkit.utils import Inputs, main_tensor, model_device, move_inputs, run_model


@contextmanager
def _train_mode(model: nn.Module) -> Iterator[None]:
    with eval_mode(model):  # restores every submodule's flag on the way out
        model.train()
        yield


def _step(model: nn.Module, inputs: Inputs) -> None:
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
    device = model_device(model)
    inputs = move_inputs(inputs, device)
    resident = state_bytes(model) + _input_bytes(inputs)
    model.zero_grad(set_to_none=True)
    try:
        with torch.enable_grad(), _train_mode(model):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
                before = torch.cuda.memory_allocated(device)
                _step(model, inputs)
                torch.cuda.synchronize(device)
                working = torch.cuda.max_memory_allocated(device) - before
            else:
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                    _step(model, inputs)
                working = _cpu_peak_from_profile(prof)
    finally:
        model.zero_grad(set_to_none=True)
    return resident + max(working, 0)
