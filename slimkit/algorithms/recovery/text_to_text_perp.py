"""text_to_text_perp: PERP recovery of a compressed causal LM -- norms, biases, head and merged MaskLoRA adapters."""

from __future__ import annotations

from slimkit.algorithms.recovery._perp import PERPRecoverer
from slimkit.core.registry import register


@register
class TextToTextPERP(PERPRecoverer):
    """PERP recovery of a causal language model: norms, biases, the head and low-rank adapters, merged in.

    After pruning or quantization the model's normalization layers, biases and output head train in place
    together with rank-``lora_r`` adapters on the attention query/value projections (``lora_target_modules``:
    ``'all-linear'`` for every Linear), on the next-token loss of ``cfg.data``; every other weight stays frozen.
    The adapters are MaskLoRA (the PERP paper's): their update keeps a pruned layer's zeros, and they are merged
    into the weights at the end, so the result is the same architecture with plain weights (no adapter layer,
    no slowdown) and saves like any model. Pruna's hyperparameter names (``lora_r``, ``lora_alpha_r_ratio``,
    ``training_batch_size``, ``gradient_accumulation_steps``, ``num_epochs``, ``learning_rate``, ``optimizer``);
    training runs on slimkit's one loop (AdamW, warm-up + cosine) with a ``steps`` / ``max_seconds`` budget.
    """

    algorithm_name = "text_to_text_perp"
    use_lora = True
    references = {"Paper": "https://arxiv.org/abs/2312.15230", "LoRA": "https://arxiv.org/abs/2106.09685",
                  "PiSSA": "https://arxiv.org/abs/2404.02948"}
