"""Prefix KV cache: longest-prefix reuse, token-identical greedy generations, a bounded LRU, bypasses."""

from __future__ import annotations

import copy

import pytest
import torch

from slimkit import zoo
from slimkit.engines.caching import PrefixLRU, attach_prefix_cache

GREEDY = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}


@pytest.fixture(scope="module")
def llama():
    return zoo.load("tiny_llama").model.eval()


def _prompt(*parts):
    return torch.tensor([sum(parts, [])])


def test_longest_stored_prefix_is_reused_and_tokens_match(llama):
    model = attach_prefix_cache(copy.deepcopy(llama), max_prefixes=8, min_prefix_tokens=2)
    system, longer = list(range(5, 15)), list(range(5, 15)) + [40, 41, 42, 43]
    with torch.no_grad():
        model.generate(_prompt(system, [99]), **GREEDY)  # stores 10 tokens
        model.generate(_prompt(longer, [98]), **GREEDY)  # reuses 10, stores 14
        before = model.prefix_cache.reused_tokens
        prompt = _prompt(longer, [44, 45])
        got = model.generate(prompt, **GREEDY)  # the 14-token prefix beats the 10-token one
        assert model.prefix_cache.reused_tokens - before == 14
        assert torch.equal(got, llama.generate(prompt, **GREEDY))


def test_lru_bound_and_bypasses(llama):
    model = attach_prefix_cache(copy.deepcopy(llama), max_prefixes=2, min_prefix_tokens=2)
    with torch.no_grad():
        for first in (10, 20, 30):
            model.generate(_prompt(list(range(first, first + 6))), **GREEDY)
        cache = model.prefix_cache
        assert len(cache) == 2 and cache.evictions == 1
        batch = torch.tensor([list(range(10, 16)), list(range(20, 26))])
        out = model.generate(batch, attention_mask=torch.ones_like(batch), **GREEDY)
        assert torch.equal(out, llama.generate(batch, attention_mask=torch.ones_like(batch), **GREEDY))
    assert cache.stats()["bypassed"] == 1 and cache.stats()["misses"] == 3
    with pytest.raises(ValueError, match="at least 1"):
        PrefixLRU(0)
    assert len(copy.deepcopy(model).prefix_cache) == 0
