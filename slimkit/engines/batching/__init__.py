"""Batching engines: group concurrent forward calls into one batched forward."""

from slimkit.engines.batching.dynamic import DynamicBatcher, QueueFullError, attach_dynamic_batcher

__all__ = ["DynamicBatcher", "QueueFullError", "attach_dynamic_batcher"]
