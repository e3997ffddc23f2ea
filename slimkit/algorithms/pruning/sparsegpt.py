"""sparsegpt: one-shot OBS pruning of a language model's Linear layers on calibration text (optionally + low-bit)."""

from __future__ import annotations

from ConfigSpace import OrdinalHyperparameter

from slimkit.algorithms.pruning._calibrated import CalibratedLLMPruner
from slimkit.algorithms.quantization import _lowbit_support as support
from slimkit.algorithms.quantization._lowbit import clip_search_hyperparameter
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import real
from slimkit.core.registry import register
from slimkit.engines.pruning.sparsegpt import sparsegpt_worker
from slimkit.engines.quantization.lowbit.quantize import LayerStatsCollector


@register
class SparseGPT(CalibratedLLMPruner):
    """SparseGPT: prune a language model's Linear layers in one shot, fixing each layer's error with its Hessian.

    Layers are processed one transformer block at a time on calibration text, as GPTQ does. Columns are swept in
    blocks: the weights to remove are those with the lowest OBS score ``w^2 / [H^-1]_jj^2`` (unstructured at
    ``sparsity``, or N:M with ``mask_structure`` "2:4" / "4:8"), and each removed weight's error is spread onto the
    columns not yet visited. With ``bits`` the kept weights are quantized in the same sweep on GPTQ's grid and
    stored packed like gptq (sparse + 4-bit). Zeros stay in dense weights (no speedup without a sparse kernel);
    the per-layer achieved sparsity and the layers left dense are recorded. Needs a tokenizer and data
    (``cfg.add_tokenizer(tok); cfg.add_data("PyDocText")``).
    """

    algorithm_name = "sparsegpt"
    aliases = ("SparseGPTModifier", "SparseGptCompressor")  # llm-compressor's modifier, MMRazor's compressor class
    references = {"SparseGPT": "https://arxiv.org/abs/2301.00774"}

    def get_hyperparameters(self) -> list:
        """Sparsity and pattern, block size, damping, optional low-bit grid, calibration size, exclusions."""
        bits, group_size, sym, _ = support.weight_hyperparameters()
        return [
            *self.pattern_hyperparameters(),
            OrdinalHyperparameter("block_size", [16, 32, 64, 128, 256], default_value=128,
                                  meta={"desc": "Columns whose mask is chosen together before the lazy update of "
                                                "the rest (a multiple of M for N:M)."}),
            real("dampening_frac", 1e-4, 1.0, 0.01, "Fraction of the mean Hessian diagonal added to it for a stable "
                 "inverse (GPTQ's damp).", log=True),
            OrdinalHyperparameter("bits", [0, *bits.sequence], default_value=0,
                                  meta={"desc": "0: prune only; 2/3/4/8: also quantize the kept weights in the same "
                                                "sweep, stored packed like gptq."}),
            group_size,
            sym,
            clip_search_hyperparameter(),
            *support.calibration_hyperparameters(),
        ]

    def worker(self, smash_config: SmashConfigPrefixWrapper, prune_n: int, prune_m: int) -> LayerStatsCollector:
        """SparseGPT's block-wise worker (:func:`sparsegpt_worker`)."""
        return sparsegpt_worker(float(smash_config["sparsity"]), prune_n, prune_m, int(smash_config["block_size"]),
                                float(smash_config["dampening_frac"]), int(smash_config["bits"]),
                                int(smash_config["group_size"]), bool(smash_config["sym"]),
                                bool(smash_config["clip_search"]))
