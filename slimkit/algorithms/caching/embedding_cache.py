"""embedding_cache: return stored outputs for token inputs an encoder has already seen."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from ConfigSpace import UniformIntegerHyperparameter

from slimkit.core.contract import SaveFn, SlimkitCacher, SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.caching import attach_embedding_cache


def _takes_input_ids(model: torch.nn.Module) -> bool:
    try:
        return "input_ids" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _generates(model: torch.nn.Module) -> bool:
    can_generate = getattr(model, "can_generate", None)
    return bool(can_generate()) if callable(can_generate) else callable(getattr(model, "generate", None))


@register
class EmbeddingCache(SlimkitCacher):
    """Cache an encoder's outputs per input row, keyed by a hash of the row's exact token ids.

    Repeated texts (the same token ids, mask and type ids) are answered from a bounded LRU without running the
    model; only the rows not seen yet run, together in one forward. Outputs are the model's own: a repeated
    call returns exactly what the first one computed. ``model.embedding_cache`` reports ``hit_rate`` and
    ``stats()``. Calls in training mode, with ``labels``, ``inputs_embeds`` or floating inputs bypass the cache.
    """

    algorithm_name = "embedding_cache"
    references = {"functools.lru_cache": "https://docs.python.org/3/library/functools.html#functools.lru_cache"}
    save_fn = SaveFn.REAPPLY
    compatible_algorithms = {"compiler": ["torch_compile"]}

    def get_hyperparameters(self) -> list:
        """Cache bound."""
        return [
            UniformIntegerHyperparameter("max_entries", 1, 10_000_000, default_value=4096,
                                         meta={"desc": "Most input rows kept; the least recently used go first."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Encoders whose forward takes ``input_ids`` and that do not generate text."""
        return isinstance(model, torch.nn.Module) and _takes_input_ids(model) and not _generates(model)

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return ("It caches encoders called with token ids (a forward taking `input_ids`, e.g. BERT classifiers and "
                "sentence encoders); generative models are not cached this way (use a prefix KV cache).")

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        return attach_embedding_cache(model, int(smash_config["max_entries"]))
