"""Embedding cache: an encoder's outputs stored per input row, keyed by a hash of its exact token ids."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

from slimkit.engines._patch import patch_forward
from slimkit.engines.caching._lru import BoundedLRU
from slimkit.engines.rows import batch_size_of, map_tensors, merge_rows, split_rows, take_rows

#: Keyword arguments that make an output depend on more than the inputs; calls with them are not cached.
UNCACHEABLE_KWARGS = ("labels", "past_key_values", "inputs_embeds", "use_cache")


def row_keys(args: tuple, kwargs: Mapping[str, Any], n: int) -> list[bytes] | None:
    """One digest per input row over every tensor's exact values (plus the call's other arguments).

    None when the call cannot be cached: a floating-point tensor input (only token ids, masks and type ids are
    exact), an argument in :data:`UNCACHEABLE_KWARGS`, or tensors without a shared batch dimension.
    """
    if any(kwargs.get(k) is not None for k in UNCACHEABLE_KWARGS):
        return None
    named = [(f"#{i}", v) for i, v in enumerate(args)] + sorted(kwargs.items())
    tensors, others = [], []
    for name, value in named:
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() or value.is_complex() or value.dim() < 1 or value.shape[0] != n:
                return None
            tensors.append((name, value.detach().cpu().contiguous()))
        else:
            others.append((name, repr(value)))
    if not tensors:
        return None
    common = repr(others).encode()
    keys = []
    for i in range(n):
        digest = hashlib.blake2b(common, digest_size=20)
        for name, tensor in tensors:
            row = tensor[i]
            digest.update(f"{name}:{row.dtype}:{tuple(row.shape)}".encode())
            digest.update(row.numpy().tobytes())
        keys.append(digest.digest())
    return keys


class EmbeddingLRU(BoundedLRU):
    """A bounded LRU of per-row encoder outputs with hit statistics; installed as a model's forward wrapper.

    Calls in training mode or that :func:`row_keys` cannot key run the model uncached (counted as ``bypassed``).
    Rows already stored are returned as stored; the missing rows (each distinct one once) run in one forward.
    """

    #: A batcher installed later goes beneath this cache (the cache sees each caller's own rows, unpadded).
    answers_before_batching = True

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}.")
        super().__init__(max_entries)
        self.max_entries = max_entries

    def __deepcopy__(self, memo: dict) -> EmbeddingLRU:
        """A copy starts empty with the same bound (stored outputs belong to the model they came from)."""
        return EmbeddingLRU(self.max_entries)

    def stats(self) -> dict[str, float | int]:
        """Counters as a JSON-able dict: hits, misses, bypassed calls, entries, max_entries, evictions, hit_rate."""
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "bypassed": self.bypassed, "entries": len(self._entries),
                    "max_entries": self.max_entries, "evictions": self.evictions, "hit_rate": self.hit_rate}

    def clear(self) -> None:
        """Drop every stored output and reset the counters."""
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = self.bypassed = self.evictions = 0

    def _lookup(self, keys: list[bytes]) -> list[Any]:
        with self._lock:
            found = []
            for key in keys:
                value = self._entries.get(key)
                if value is not None:
                    self._entries.move_to_end(key)
                    self.hits += 1
                else:
                    self.misses += 1
                found.append(value)
            return found

    def __call__(self, module: torch.nn.Module, inner: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """Answer a forward call from the cache where possible (the handler :func:`attach_embedding_cache` installs)."""
        n = batch_size_of(args, kwargs)
        keys = None if module.training or n is None else row_keys(args, kwargs, n)
        if keys is None:
            self._bypass()
            return inner(*args, **kwargs)
        found = self._lookup(keys)
        missing: dict[bytes, int] = {}
        for i, (key, value) in enumerate(zip(keys, found, strict=True)):
            if value is None and key not in missing:
                missing[key] = i
        if len(missing) == n:  # nothing stored and no repeats: the uncached forward, exactly
            output = inner(*args, **kwargs)
            for key, row in zip(keys, split_rows(output, n), strict=True):
                self._put(key, map_tensors(row, lambda t: t.detach().clone()))
            return output
        if missing:
            sub_args, sub_kwargs = take_rows(args, kwargs, list(missing.values()))
            computed = split_rows(inner(*sub_args, **sub_kwargs), len(missing))
            fresh = {}
            for key, row in zip(missing, computed, strict=True):
                fresh[key] = map_tensors(row, lambda t: t.detach().clone())
                self._put(key, fresh[key])
            found = [value if value is not None else fresh[key] for key, value in zip(keys, found, strict=True)]
        return merge_rows(found)


def attach_embedding_cache(model: torch.nn.Module, max_entries: int) -> torch.nn.Module:
    """Cache ``model``'s outputs per input row; the cache is ``model.embedding_cache`` (hit_rate, stats()).

    The state dict is unchanged (the cache wraps the instance's forward), so the weights save as the model's own.
    """
    return patch_forward(model, "embedding_cache", EmbeddingLRU(max_entries))


__all__ = ["EmbeddingLRU", "UNCACHEABLE_KWARGS", "attach_embedding_cache", "row_keys"]
