"""Inputs for engines that run the model before changing it: calibration batches and export examples.

Sources, in the order they are tried (the first given wins):

1. ``data`` (a datamodule): batches of its train split (the ``(inputs, labels)`` collates give their inputs);
2. ``tokenizer``: PyDocText calibration text (Python's own docs, disjoint from the test text);
3. ``example`` inputs (``cfg.add_example_inputs``): one batch, enough for structure and a smoke test, thin for
   statistics.

Nothing else is guessed: without any of them a :class:`DataError` says how to add data.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

from slimkit.data.batches import LABEL_KEYS
from slimkit.engines.rows import map_tensors
from slimkit.errors import DataError
from slimkit.evaluation.runtime import batch_size_of
from slimkit.utils import Inputs, model_device, move_inputs


def batch_inputs(batch: Any) -> Inputs:
    """The model inputs of one data batch: drop labels from ``(inputs, labels)`` tuples and dict batches."""
    if isinstance(batch, Mapping):
        return {k: v for k, v in batch.items() if k not in LABEL_KEYS}
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0]
    return batch


def slice_inputs(inputs: Inputs, start: int, stop: int) -> Inputs:
    """Rows ``start:stop`` of every batched tensor in ``inputs`` (other values are kept as they are)."""
    n = batch_size_of(inputs)
    return map_tensors(inputs, lambda v: v[start:stop] if v.dim() > 0 and v.shape[0] == n else v)


def truncate_tokens(inputs: Inputs, max_seq_len: int) -> Inputs:
    """Cut integer ``[batch, seq]`` tensors (token ids, masks) to ``max_seq_len`` positions."""
    return map_tensors(inputs, lambda v: v[:, :max_seq_len] if v.dim() == 2 and not v.is_floating_point() else v)


def accepts_kwarg(model: Any, name: str) -> bool:
    """Whether ``model.forward`` takes a keyword argument ``name`` (by name or through ``**kwargs``)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _text_batches(model: Any, tokenizer: Any, n_samples: int, seq_len: int, batch_size: int) -> list[Inputs]:
    from slimkit.data import pydoc_text_blocks

    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(limit, int) and limit > 0:
        seq_len = min(seq_len, limit)
    ids = pydoc_text_blocks(tokenizer, n_samples, seq_len, split="calibration")
    with_mask = accepts_kwarg(model, "attention_mask")
    out: list[Inputs] = []
    for i in range(0, n_samples, batch_size):
        chunk = ids[i : i + batch_size]
        out.append({"input_ids": chunk, "attention_mask": torch.ones_like(chunk)} if with_mask
                   else {"input_ids": chunk})
    return out


def _data_batches(data: Any, n_samples: int, seq_len: int, batch_size: int) -> list[Inputs]:
    out: list[Inputs] = []
    seen = 0
    for batch in data.train_dataloader(batch_size=batch_size, shuffle=False):
        inputs = truncate_tokens(batch_inputs(batch), seq_len)
        take = min(batch_size_of(inputs), n_samples - seen)
        out.append(slice_inputs(inputs, 0, take))
        seen += take
        if seen >= n_samples:
            break
    if not out:
        raise DataError("The SmashConfig's data has an empty train split; calibration needs at least one batch.")
    return out


def calibration_batches(
    model: Any, n_samples: int, *, data: Any = None, tokenizer: Any = None, example: Inputs | None = None,
    seq_len: int = 128, batch_size: int = 8, purpose: str = "",
) -> tuple[list[Inputs], str]:
    """Up to ``n_samples`` calibration samples as batches on the model's device, and where they came from.

    ``seq_len`` caps token sequences; ``purpose`` names the caller in the error raised when no source exists.
    """
    if data is not None:
        batches, source = _data_batches(data, n_samples, seq_len, batch_size), f"data {getattr(data, 'name', '')}"
    elif tokenizer is not None:
        batches, source = _text_batches(model, tokenizer, n_samples, seq_len, batch_size), "PyDocText calibration text"
    elif example is not None:
        batches, source = [example], "SmashConfig example inputs"
    else:
        raise DataError(
            f"{purpose or 'This algorithm'} needs calibration inputs, and the SmashConfig has none. Add data "
            "with cfg.add_data(...) (e.g. cfg.add_data('PyDocText') for language models, or your own "
            "(train, val, test) with collate_fn='image_classification_collate'), a tokenizer with "
            "cfg.add_tokenizer(...) for text models, or one batch with cfg.add_example_inputs(...)."
        )
    device = model_device(model)
    return [move_inputs(b, device) for b in batches], source


def example_inputs(model: Any, *, example: Inputs | None = None, data: Any = None, purpose: str = "") -> Inputs:
    """One batch of inputs that ``model`` accepts (for tracing/export): ``example``, else a batch of ``data``."""
    if example is not None:
        return move_inputs(example, model_device(model))
    if data is not None:
        batch = next(iter(data.train_dataloader(batch_size=2, shuffle=False)))
        return move_inputs(batch_inputs(batch), model_device(model))
    raise DataError(
        f"{purpose or 'This algorithm'} needs example inputs to trace the model, and the SmashConfig has none. "
        "Add them with cfg.add_example_inputs(inputs) (a Tensor, tuple or dict the model accepts), or add data "
        "with cfg.add_data(...) whose batches the model accepts."
    )
