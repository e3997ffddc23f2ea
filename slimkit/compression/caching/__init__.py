"""Caching engines: reuse a model's outputs for inputs it has seen."""

from slimkit.compression.caching.embedding import EmbeddingCache, attach_embedding_cache
from slimkit.compression.caching.prefix import PrefixCache, attach_prefix_cache

__all__ = ["EmbeddingCache", "PrefixCache", "attach_embedding_cache", "attach_prefix_cache"]
