"""dynamic_batch: group concurrent callers' requests into one forward (dynamic micro-batching)."""

from __future__ import annotations

from typing import Any

from ConfigSpace import CategoricalHyperparameter, UniformFloatHyperparameter, UniformIntegerHyperparameter

from slimkit.core.contract import SaveFn, SlimkitBatcher, SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.batching import attach_dynamic_batcher
from slimkit.engines.batching.packing import PACK_MODES


@register
class DynamicBatch(SlimkitBatcher):
    """Group concurrent callers' forward calls into one batched forward (dynamic micro-batching).

    Callers in different threads call the model as usual; calls arriving within ``max_wait_ms`` of each other
    with the same argument layout run as one batch of up to ``max_batch_size`` rows. Token inputs of different
    lengths that carry an ``attention_mask`` are right-padded and each caller gets its own rows back, cut to its
    own length. An error in one request reaches only its caller; past ``max_queue`` waiting requests a call is
    refused with ``QueueFullError``. ``model.dynamic_batcher.stats()`` reports batch sizes.

    Sentence encoders (the zoo MiniLM's ``SentenceEncoder``: mean pooling + L2 norm over a BERT-like encoder) run
    a batch *packed* instead of padded (``pack`` "auto", the default): the sentences' real tokens in one sequence
    with positions restarting per sentence and attention kept within each sentence, so no pad token is computed;
    each sentence's embedding equals its unbatched one to float rounding. ``pack="on"`` refuses models that cannot
    pack; "off" always pads.
    """

    algorithm_name = "dynamic_batch"
    near_names = ("ifw", "whisper_s2t")  # Pruna's names for close algorithms (errors point here)
    references = {"Triton dynamic batching": "https://docs.nvidia.com/deeplearning/triton-inference-server/"
                  "user-guide/docs/user_guide/model_configuration.html#dynamic-batcher"}
    save_fn = SaveFn.REAPPLY

    def get_hyperparameters(self) -> list:
        """Batch size bound, wait time and queue bound."""
        return [
            UniformIntegerHyperparameter("max_batch_size", 1, 4096, default_value=32,
                                         meta={"desc": "Most rows (summed over requests) in one forward."}),
            UniformFloatHyperparameter("max_wait_ms", 0.0, 1000.0, default_value=10.0,
                                       meta={"desc": "How long a request waits for others before its batch runs."}),
            UniformIntegerHyperparameter("max_queue", 1, 1_000_000, default_value=1024,
                                         meta={"desc": "Most waiting requests; more are refused with an error."}),
            UniformFloatHyperparameter("max_padding", 0.0, 100.0, default_value=0.25,
                                       meta={"desc": "Token inputs of different lengths are split into forwards of "
                                                     "similar length so padding adds at most this fraction of the "
                                                     "real tokens."}),
            CategoricalHyperparameter("pack", list(PACK_MODES), default_value="auto",
                                      meta={"desc": "Run a sentence encoder's batch as one padding-free packed "
                                                    "sequence: 'auto' when the model supports it, 'on' (refuse "
                                                    "models that do not), 'off' (always pad)."}),
            UniformIntegerHyperparameter("max_pack_tokens", 16, 65536, default_value=512,
                                         meta={"desc": "Most tokens in one packed sequence; more start another."}),
        ]

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return "It batches calls to a torch.nn.Module."

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        pad = getattr(getattr(model, "config", None), "pad_token_id", None)
        return attach_dynamic_batcher(model, int(smash_config["max_batch_size"]), float(smash_config["max_wait_ms"]),
                                      int(smash_config["max_queue"]), pad if isinstance(pad, int) else 0,
                                      float(smash_config["max_padding"]), str(smash_config["pack"]),
                                      int(smash_config["max_pack_tokens"]))
