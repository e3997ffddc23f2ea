"""wanda: prune a language model's Linear layers by |weight| x input-activation norm, per output row."""

from __future__ import annotations

from slimkit.algorithms.pruning._calibrated import CalibratedLLMPruner
from slimkit.algorithms.quantization import _lowbit_support as support
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.pruning.wanda import wanda_worker
from slimkit.engines.quantization.lowbit.quantize import LayerStatsCollector


@register
class Wanda(CalibratedLLMPruner):
    """Wanda: zero each output row's weights with the lowest ``|W_ij| * ||X_j||_2`` on calibration text, no update.

    Only the input norms of each layer are collected (no Hessian), one transformer block at a time, so it is much
    cheaper than sparsegpt; unstructured at ``sparsity`` or N:M with ``mask_structure`` "2:4" / "4:8". Zeros stay in
    dense weights (no speedup without a sparse kernel); the per-layer achieved sparsity and the layers left dense
    are recorded. Needs a tokenizer and data (``cfg.add_tokenizer(tok); cfg.add_data("PyDocText")``).
    """

    algorithm_name = "wanda"
    aliases = ("WandaPruningModifier",)  # llm-compressor's modifier
    references = {"Wanda": "https://arxiv.org/abs/2306.11695"}

    def get_hyperparameters(self) -> list:
        """Sparsity and pattern, calibration size, exclusions."""
        return [*self.pattern_hyperparameters(), *support.calibration_hyperparameters()]

    def worker(self, smash_config: SmashConfigPrefixWrapper, prune_n: int, prune_m: int) -> LayerStatsCollector:
        """Wanda's block-wise worker (:func:`wanda_worker`)."""
        return wanda_worker(float(smash_config["sparsity"]), prune_n, prune_m)
