"""Small helpers shared across slimkit: calling a model on example inputs, picking its main output.

``move_inputs`` (nested tensors to a device) lives in :mod:`slimkit.core.devices` and is importable from here.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import torch

from slimkit.core.devices import move_inputs  # noqa: F401  (its home is core.devices; callers import it here)

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
        preferred = [output.get(key) for key in ("logits", "embeddings", "last_hidden_state", "pooler_output")]
        found = next((v for v in (*preferred, *output.values()) if isinstance(v, torch.Tensor)), None)
        if found is not None:
            return found
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


def model_device(model: Any) -> torch.device:
    """Device of the first parameter or buffer of ``model`` (CPU when it has none)."""
    tensors = itertools.chain(model.parameters(), model.buffers()) if isinstance(model, torch.nn.Module) else ()
    return next((tensor.device for tensor in tensors), torch.device("cpu"))
