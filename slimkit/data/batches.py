"""Reading a batch: the one place that decides which part of a batch is model input and which is the target.

Every loop in slimkit (training, data-driven pruning statistics, accuracy) reads batches with
:func:`split_batch`. The accepted shapes are what the built-in collates and ordinary ``DataLoader`` s yield:

- ``(inputs, targets)`` (a tuple or list of two; ``inputs`` may itself be a tensor, tuple or dict),
- ``(inputs,)`` (a 1-tuple or 1-list: no targets),
- a mapping of model keyword inputs (Hugging Face style; its ``labels`` stay in it so such a model computes
  its own ``.loss``, unless ``label_keys`` names keys to take out as the targets),
- a tensor (model input, no targets).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from slimkit.core.devices import move_inputs
from slimkit.errors import DataError

#: Keys that hold the targets of a dict batch (HF datasets name them ``label`` or ``labels``).
LABEL_KEYS: tuple[str, ...] = ("label", "labels")

ALLOWED_BATCHES = "(inputs, targets), (inputs,), a dict of model keyword inputs, or an input tensor"


def split_batch(batch: Any, *, label_keys: Sequence[str] = ()) -> tuple[Any, Any]:
    """Split one batch into ``(inputs, targets)``; ``targets`` is None when the batch carries none.

    ``label_keys``: for a mapping batch, the first of these keys present is taken out of the inputs and
    returned as the targets (and then one of them must be present). Empty (the default): a mapping is all
    model inputs, targets None. Anything but the shapes listed in the module docstring raises
    :class:`~slimkit.errors.DataError` naming what was given.
    """
    if isinstance(batch, torch.Tensor):
        return batch, None
    if isinstance(batch, Mapping):
        if not label_keys:
            return batch, None
        key = next((k for k in label_keys if k in batch), None)
        if key is None:
            wanted = " or ".join(repr(k) for k in label_keys)
            raise DataError(
                f"A dict batch needs a {wanted} key, got keys {sorted(map(str, batch))}; "
                "rename the target key or yield (inputs, labels) tuples."
            )
        return {k: v for k, v in batch.items() if k != key and k not in label_keys}, batch[key]
    if isinstance(batch, (tuple, list)) and len(batch) in (1, 2):
        return batch[0], (batch[1] if len(batch) == 2 else None)
    size = f" with {len(batch)} items" if isinstance(batch, (tuple, list)) else ""
    raise DataError(f"Cannot read a batch of type {type(batch).__name__}{size}; yield {ALLOWED_BATCHES}.")


def move_batch(batch: Any, device: torch.device | str) -> Any:
    """``batch`` with every tensor in it (nested in tuples, lists and dicts) moved to ``device``."""
    return move_inputs(batch, device)
