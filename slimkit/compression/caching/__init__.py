"""Caching engines: reuse a model's outputs for inputs it has seen."""

from slimkit.compression.caching.embedding import EmbeddingCache, attach_embedding_cache

__all__ = ["EmbeddingCache", "attach_embedding_cache"]
