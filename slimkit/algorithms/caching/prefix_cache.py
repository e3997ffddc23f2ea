"""prefix_cache: reuse the KV cache of a shared prompt prefix across a causal LM's generate calls."""

from __future__ import annotations

from typing import Any

import torch
from ConfigSpace import UniformIntegerHyperparameter

from slimkit.core.contract import SaveFn, SlimkitCacher, SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.caching import attach_prefix_cache


@register
class PrefixCache(SlimkitCacher):
    """Compute the key/value cache of a prompt prefix once and reuse it in later ``generate`` calls.

    Each single-prompt ``generate`` looks up the longest stored prompt that starts the same way (a system prompt,
    a few-shot preamble, an earlier chat turn), computes only the remaining tokens, and stores its own prompt's
    cache in a bounded LRU. Greedy generations are the same tokens as without the cache. ``model.prefix_cache``
    reports ``hit_rate``, ``reused_tokens`` and ``stats()``.
    """

    algorithm_name = "prefix_cache"
    references = {"Hugging Face prefix caching": "https://huggingface.co/docs/transformers/kv_cache"}
    save_fn = SaveFn.REAPPLY
    compatible_algorithms = {"compiler": ["torch_compile"]}

    def get_hyperparameters(self) -> list:
        """LRU bound and shortest reused prefix."""
        return [
            UniformIntegerHyperparameter("max_prefixes", 1, 100_000, default_value=32,
                                         meta={"desc": "Most prompt caches kept; the least recently used go first."}),
            UniformIntegerHyperparameter("min_prefix_tokens", 1, 100_000, default_value=4,
                                         meta={"desc": "Shortest shared prefix worth reusing."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Hugging Face causal LMs (a ``generate`` method and a config)."""
        can_generate = getattr(model, "can_generate", None)
        return (isinstance(model, torch.nn.Module) and callable(can_generate) and bool(can_generate())
                and getattr(model, "config", None) is not None)

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return ("It caches the prompt KV cache of Hugging Face causal LMs (models whose can_generate() is True); "
                "for encoders use embedding_cache.")

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        return attach_prefix_cache(model, int(smash_config["max_prefixes"]), int(smash_config["min_prefix_tokens"]))
