"""Small helpers shared across slimkit: calling a model on example inputs, picking its main output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

Inputs = Any  # a Tensor, a tuple/list of Tensors (positional args) or a mapping of keyword args


def run_model(model: Any, inputs: Inputs) -> Any:
    """Call ``model`` on ``inputs``: a mapping is passed as keyword args, a tuple/list as positional args."""
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def main_tensor(output: Any) -> torch.Tensor:
    """Return the tensor that best represents a model output (logits, last hidden state, or the first tensor).

    Works for plain tensors, tuples/lists and Hugging Face ``ModelOutput`` objects.
    """
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping):
        for key in ("logits", "embeddings", "last_hidden_state", "pooler_output"):
            value = output.get(key)
            if isinstance(value, torch.Tensor):
                return value
        for value in output.values():
            if isinstance(value, torch.Tensor):
                return value
    if isinstance(output, (tuple, list)):
        for value in output:
            if isinstance(value, torch.Tensor):
                return value
            if isinstance(value, (tuple, list, Mapping)):
                return main_tensor(value)
    raise TypeError(
        f"Cannot find a tensor in a model output of type {type(output).__name__}; "
        "return a Tensor, a tuple of Tensors or a Hugging Face ModelOutput."
    )


def move_inputs(inputs: Inputs, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Inputs:
    """Move every tensor in ``inputs`` to ``device``; floating tensors are also cast to ``dtype`` when given."""

    def move(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        return t.to(device) if device is not None else t

    if isinstance(inputs, Mapping):
        return {k: move(v) for k, v in inputs.items()}
    if isinstance(inputs, (tuple, list)):
        return type(inputs)(move(v) for v in inputs)
    return move(inputs)


def model_device(model: Any) -> torch.device:
    """Device of the first parameter or buffer of ``model`` (CPU when it has none)."""
    if isinstance(model, torch.nn.Module):
        for tensor in model.parameters():
            return tensor.device
        for tensor in model.buffers():
            return tensor.device
    return torch.device("cpu")
