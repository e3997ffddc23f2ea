"""Prefix KV cache: a causal LM's key/value cache of a prompt, reused by later prompts that start the same way."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from slimkit.engines._patch import patch_forward
from slimkit.engines.caching._lru import BoundedLRU


def _common_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _crop(cache: Any, length: int) -> Any:
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)
    return cache


class PrefixLRU(BoundedLRU):
    """A bounded LRU of prompt KV caches; ``generate`` reuses the longest stored prefix of a new prompt.

    Only the prompt tokens after the matched prefix are computed, so greedy generations are the same tokens
    as without the cache. Single-prompt calls (batch 1, no padding, no ``past_key_values`` of their own) are
    cached; others run unchanged (``bypassed``).
    """

    def __init__(self, max_prefixes: int, min_prefix_tokens: int = 1) -> None:
        if max_prefixes < 1 or min_prefix_tokens < 1:
            raise ValueError(f"max_prefixes and min_prefix_tokens must be at least 1, got {max_prefixes} and "
                             f"{min_prefix_tokens}.")
        super().__init__(max_prefixes)
        self.max_prefixes, self.min_prefix_tokens = max_prefixes, min_prefix_tokens
        self.reused_tokens = 0

    def __deepcopy__(self, memo: dict) -> PrefixLRU:
        """A copy starts empty with the same bounds."""
        return PrefixLRU(self.max_prefixes, self.min_prefix_tokens)

    def stats(self) -> dict[str, float | int]:
        """Counters as a JSON-able dict (hits, misses, bypassed, reused_tokens, entries, evictions, hit_rate)."""
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "bypassed": self.bypassed,
                    "reused_tokens": self.reused_tokens, "entries": len(self._entries),
                    "max_prefixes": self.max_prefixes, "evictions": self.evictions, "hit_rate": self.hit_rate}

    def lookup(self, ids: tuple[int, ...]) -> tuple[Any, int]:
        """A private copy of the cache of the longest stored prefix of ``ids`` (leaving one token to compute)."""
        with self._lock:
            best, best_len = None, 0
            for key in self._entries:
                n = min(_common_length(key, ids), len(ids) - 1)
                if n > best_len:
                    best, best_len = key, n
            if best is None or best_len < self.min_prefix_tokens:
                self.misses += 1
                return None, 0
            self._entries.move_to_end(best)
            self.hits += 1
            self.reused_tokens += best_len
            return _crop(copy.deepcopy(self._entries[best]), best_len), best_len

    def store(self, ids: tuple[int, ...], cache: Any) -> None:
        """Keep ``cache`` (cut to ``len(ids)`` tokens) as prefix ``ids``'s cache; evict the oldest past the bound."""
        if len(ids) < self.min_prefix_tokens:
            return
        cache = _crop(cache, len(ids))
        self._put(ids, cache)

    def __call__(self, module: torch.nn.Module, inner: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """Run ``generate`` with the longest stored prefix of the prompt, then store this prompt's cache."""
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        cacheable = (
            not module.training and isinstance(ids, torch.Tensor) and ids.dim() == 2 and ids.shape[0] == 1
            and ids.shape[1] >= 2 and kwargs.get("past_key_values") is None
            and (mask is None or bool((mask != 0).all())) and kwargs.get("inputs_embeds") is None
        )
        if not cacheable:
            self._bypass()
            return inner(*args, **kwargs)
        from transformers import DynamicCache  # noqa: PLC0415 - transformers loads slowly; only generation needs it

        prompt = tuple(ids[0].tolist())
        past, _ = self.lookup(prompt)
        if past is None:
            past = DynamicCache(config=module.config)
        output = inner(*args, **{**kwargs, "past_key_values": past})
        self.store(prompt[:-1], past)
        return output


def attach_prefix_cache(model: torch.nn.Module, max_prefixes: int, min_prefix_tokens: int = 1) -> torch.nn.Module:
    """Reuse prompt KV caches in ``model.generate``; the cache is ``model.prefix_cache`` (hit_rate, stats())."""
    return patch_forward(model, "prefix_cache", PrefixLRU(max_prefixes, min_prefix_tokens), method="generate")


__all__ = ["PrefixLRU", "attach_prefix_cache"]
