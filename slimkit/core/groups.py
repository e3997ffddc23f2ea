"""The algorithm groups and their experiment kinds: plain data, importable without torch (the CLI's parser)."""

from __future__ import annotations

__all__ = ["GROUPS", "KIND_OF_GROUP"]

#: Algorithm groups in the order smash() applies them.
GROUPS: tuple[str, ...] = ("pruner", "distiller", "recoverer", "quantizer", "cacher", "compiler", "batcher")

#: The experiment ``"type"`` of each group (``"type": "pruning", "compressor": "l1_filter"``).
KIND_OF_GROUP: dict[str, str] = {
    "pruner": "pruning",
    "distiller": "distillation",
    "recoverer": "recovery",
    "quantizer": "quantization",
    "cacher": "caching",
    "compiler": "compilation",
    "batcher": "batching",
}
