"""Batching engines: group concurrent forward calls into one batched forward."""

from slimkit.compression.batching.dynamic import DynamicBatcher, QueueFullError, attach_dynamic_batcher

__all__ = ["DynamicBatcher", "QueueFullError", "attach_dynamic_batcher"]
