"""Split batched model inputs and outputs into rows and put rows back together (shared by caching and batching).

A "batched" value is a tensor whose first dimension is the batch, or a tuple / list / mapping (a Hugging Face
``ModelOutput`` included) of such values. Values that are not batched (``None``, flags, a scalar loss) are kept
as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch


def batch_size_of(args: tuple, kwargs: Mapping[str, Any]) -> int | None:
    """The batch size shared by every tensor argument, or None when there is no tensor or sizes disagree."""
    sizes = {v.shape[0] for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor) and v.dim() >= 1}
    return sizes.pop() if len(sizes) == 1 else None


def take_rows(args: tuple, kwargs: Mapping[str, Any], index: torch.Tensor | list[int]) -> tuple[tuple, dict]:
    """Select rows ``index`` of every tensor argument (non-tensor arguments are passed through)."""
    def pick(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.dim() >= 1:
            return v[torch.as_tensor(index, dtype=torch.long, device=v.device)]
        return v

    return tuple(pick(a) for a in args), {k: pick(v) for k, v in kwargs.items()}


def _rebuild(value: Any, items: dict[str, Any]) -> Any:
    """A mapping of ``value``'s type holding ``items`` (dict for plain mappings, the same class for ModelOutput)."""
    if type(value) is dict:
        return items
    try:
        return type(value)(**items)
    except TypeError:
        return dict(items)


def _same_sequence(value: tuple | list, items: list[Any]) -> Any:
    """A sequence of ``value``'s type holding ``items`` (a named tuple takes them as its fields)."""
    return type(value)(items) if type(value) in (tuple, list) else type(value)(*items)


def split_rows(value: Any, n: int) -> list[Any]:
    """Split a batched output of batch size ``n`` into ``n`` outputs of batch size 1 (same structure)."""
    if isinstance(value, torch.Tensor):
        if value.dim() >= 1 and value.shape[0] == n:
            return list(value.split(1, dim=0))
        return [value] * n
    if isinstance(value, Mapping):
        per_key = {k: split_rows(v, n) for k, v in value.items()}
        return [_rebuild(value, {k: rows[i] for k, rows in per_key.items()}) for i in range(n)]
    if isinstance(value, (tuple, list)):
        columns = [split_rows(v, n) for v in value]
        return [_same_sequence(value, [col[i] for col in columns]) for i in range(n)]
    return [value] * n


def merge_rows(rows: list[Any]) -> Any:
    """Concatenate outputs (each of a batch of rows) along the batch dimension; the inverse of :func:`split_rows`."""
    first = rows[0]
    if isinstance(first, torch.Tensor):
        if first.dim() >= 1 and all(isinstance(r, torch.Tensor) and r.dim() == first.dim() for r in rows):
            return torch.cat(rows, dim=0)
        return first
    if isinstance(first, Mapping):
        return _rebuild(first, {k: merge_rows([r[k] for r in rows]) for k in first})
    if isinstance(first, (tuple, list)):
        return _same_sequence(first, [merge_rows([r[i] for r in rows]) for i in range(len(first))])
    return first


def map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply ``fn`` to every tensor inside ``value``, keeping the structure."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, Mapping):
        return _rebuild(value, {k: map_tensors(v, fn) for k, v in value.items()})
    if isinstance(value, (tuple, list)):
        return _same_sequence(value, [map_tensors(v, fn) for v in value])
    return value


__all__ = ["batch_size_of", "map_tensors", "merge_rows", "split_rows", "take_rows"]
