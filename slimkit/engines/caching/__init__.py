"""Caching engines: reuse a model's outputs for inputs it has seen, or a UNet's features across steps."""

from slimkit.engines.caching.embedding import EmbeddingLRU, attach_embedding_cache
from slimkit.engines.caching.prefix import PrefixLRU, attach_prefix_cache
from slimkit.engines.caching.step import DeepFeatureCache, attach_step_cache

__all__ = ["DeepFeatureCache", "EmbeddingLRU", "PrefixLRU", "attach_embedding_cache", "attach_prefix_cache",
           "attach_step_cache"]
