"""Caching engines: reuse a model's outputs for inputs it has seen, or a UNet's features across steps."""

from slimkit.compression.caching.embedding import EmbeddingCache, attach_embedding_cache
from slimkit.compression.caching.prefix import PrefixCache, attach_prefix_cache
from slimkit.compression.caching.step import StepCache, attach_step_cache

__all__ = ["EmbeddingCache", "PrefixCache", "StepCache", "attach_embedding_cache", "attach_prefix_cache",
           "attach_step_cache"]
