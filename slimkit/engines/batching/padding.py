"""Collate several requests into one batch (right-padding token inputs) and hand each its part of the output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from slimkit.engines.rows import map_tensors

#: Keyword tensors ``[batch, seq]`` that are right-padded when requests of different lengths share a batch
#: (only when the call passes an ``attention_mask``, which masks the padding out).
TOKEN_KEYS = ("input_ids", "attention_mask", "token_type_ids", "position_ids")


def _paddable(kwargs: Mapping[str, Any]) -> bool:
    mask = kwargs.get("attention_mask")
    return isinstance(mask, torch.Tensor) and mask.dim() == 2


def _is_token(name: str, value: Any, paddable: bool) -> bool:
    return paddable and name in TOKEN_KEYS and isinstance(value, torch.Tensor) and value.dim() == 2


def _describe(value: Any, variable_length: bool = False) -> tuple:
    if isinstance(value, torch.Tensor):
        shape = tuple(value.shape[1:])
        return ("tensor", str(value.dtype), str(value.device), (-1,) if variable_length else shape)
    return ("value", repr(value))


def call_signature(args: tuple, kwargs: Mapping[str, Any]) -> tuple:
    """What must match for two calls to share a batch; the last two items are grad mode and inference mode."""
    paddable = _paddable(kwargs)
    return (
        tuple(_describe(a) for a in args),
        tuple((k, _describe(v, _is_token(k, v, paddable))) for k, v in sorted(kwargs.items())),
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
    )


def _length(kwargs: Mapping[str, Any]) -> int | None:
    return int(kwargs["attention_mask"].shape[1]) if _paddable(kwargs) else None


def collate(calls: list[tuple[tuple, dict]], pad_token_id: int) -> tuple[tuple, dict, list[int] | None]:
    """One batched call from calls of equal signature; also the sequence length of each (None when not padded)."""
    first_args, first_kwargs = calls[0]
    lengths = [_length(kw) for _, kw in calls]
    padded = lengths[0] is not None and len(set(lengths)) > 1
    longest = max(lengths) if padded else None

    def join(values: list[Any], name: str | None) -> Any:
        if not isinstance(values[0], torch.Tensor):
            return values[0]
        if padded and name is not None and _is_token(name, values[0], True):
            fill = pad_token_id if name == "input_ids" else 0
            values = [F.pad(v, (0, longest - v.shape[1]), value=fill) for v in values]
        return torch.cat(values, dim=0)

    args = tuple(join([a[i] for a, _ in calls], None) for i in range(len(first_args)))
    kwargs = {k: join([kw[k] for _, kw in calls], k) for k in first_kwargs}
    return args, kwargs, lengths if padded else None


def length_groups(calls: list[tuple[tuple, dict]], rows: list[int], max_padding: float) -> list[list[int]]:
    """Indices of ``calls`` in groups of similar length, shortest first (one group when nothing is padded).

    Right-padding a group to its longest call adds at most ``max_padding`` times the group's real tokens.
    """
    lengths = [_length(kw) for _, kw in calls]
    if None in lengths or len(set(lengths)) <= 1:
        return [list(range(len(calls)))]
    groups: list[list[int]] = []
    current: list[int] = []
    real = count = 0
    for i in sorted(range(len(calls)), key=lambda i: lengths[i]):
        length, n = lengths[i], rows[i]
        if current and length * (count + n) > (1 + max_padding) * (real + length * n):
            groups.append(current)
            current, real, count = [], 0, 0
        current.append(i)
        real, count = real + length * n, count + n
    return [*groups, current]


def uncollate(output: Any, rows: list[int], lengths: list[int] | None) -> list[Any]:
    """Each request's rows of a batched ``output``; padded sequence dimensions are cut back to its own length.

    A dimension (after the batch) whose size is the padded length counts as a sequence dimension.
    """
    total, parts, start = sum(rows), [], 0
    longest = max(lengths) if lengths else None
    for i, n in enumerate(rows):
        def cut(t: torch.Tensor, start: int = start, n: int = n, own: int | None = None if not lengths else lengths[i]):
            if t.dim() >= 1 and t.shape[0] == total:
                t = t[start : start + n]
                if own is not None and own < longest:
                    for d in range(1, t.dim()):
                        if t.shape[d] == longest:
                            t = t.narrow(d, 0, own)
            return t

        parts.append(map_tensors(output, cut))
        start += n
    return parts


__all__ = ["TOKEN_KEYS", "call_signature", "collate", "length_groups", "uncollate"]
