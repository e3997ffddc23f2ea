"""text_to_text_inplace_perp: PERP recovery training only a causal LM's norms, biases and head, in place."""

from __future__ import annotations

from slimkit.algorithms.recovery._perp import PERPRecoverer
from slimkit.core.registry import register


@register
class TextToTextInPlacePERP(PERPRecoverer):
    """In-place PERP recovery of a causal language model: train only its normalization layers, biases and head.

    The subset of existing weights PERP found sufficient to win back much of the quality lost to compression
    trains on the next-token loss of ``cfg.data``; every other weight is frozen, nothing is added, so pruned
    zeros and quantized layers stay as they are. Pruna's hyperparameter names (``training_batch_size``,
    ``gradient_accumulation_steps``, ``num_epochs``, ``learning_rate``, ``optimizer``); training runs on
    slimkit's one loop (AdamW, warm-up + cosine) with a ``steps`` / ``max_seconds`` budget.
    """

    algorithm_name = "text_to_text_inplace_perp"
    use_lora = False
