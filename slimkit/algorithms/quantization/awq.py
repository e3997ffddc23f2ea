"""awq: activation-aware weight quantization (calibrated per-channel scales, folded), stored packed."""

from __future__ import annotations

from typing import Any

from ConfigSpace import UniformIntegerHyperparameter

from slimkit.algorithms.quantization import _lowbit_support as support
from slimkit.algorithms.quantization._lowbit import CalibratedLowBitQuantizer, clip_search_hyperparameter
from slimkit.algorithms.quantization._targets import model_targets
from slimkit.core.contract import LayerResult, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.engines.quantization.lowbit import quantize_model_awq
from slimkit.engines.quantization.lowbit.blockwise import BlockStep, awq_step


@register
class AWQ(CalibratedLowBitQuantizer):
    """AWQ: activation-aware scaling of each Linear's input channels before group-wise rounding.

    Channels are scaled by ``mean|x|^alpha`` so the ones that meet large activations keep more precision;
    ``alpha`` is searched on a grid per layer group. The inverse scale is folded into the preceding norm or
    Linear where that is exact (otherwise the packed layer keeps a small input-scale vector, or, with
    ``fold_only``, the layer is not scaled); each group's
    clipping range is then searched on activation-weighted error. Runs block by block on calibration text;
    needs a tokenizer and data (e.g. ``cfg.add_tokenizer(tok); cfg.add_data("PyDocText")``). Stored packed
    like rtn.
    """

    algorithm_name = "awq"
    produces = LayerResult(input_scale_unless="fold_only")
    renamed_hyperparameters = {"awq": {"weight_bits": "bits"}}  # Pruna's name
    references = {"AWQ": "https://arxiv.org/abs/2306.00978"}

    def get_hyperparameters(self) -> list:
        """Bits, group size, sym, grid size, clipping, fold-only, calibration size, exclusions."""
        return [
            *support.weight_hyperparameters(),
            UniformIntegerHyperparameter("n_grid", 2, 100, default_value=10,
                                         meta={"desc": "Values of alpha tried in [0, 1) per layer group (for "
                                                               "each of the two scale formulas)."}),
            clip_search_hyperparameter(),
            Boolean("fold_only", False, meta={"desc": "Scale only the layers whose 1/s folds into a preceding norm or "
                                                      "Linear (AutoAWQ's rule); the others are rounded unscaled, so "
                                                      "no layer keeps an input scale. Needed to save as "
                                                      "compressed-tensors / gptq or compile to GGUF."}),
            *support.calibration_hyperparameters(),
        ]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        targets = model_targets(model)
        ids = support.read_calibration_ids(model, smash_config)
        specs = quantize_model_awq(model, ids, smash_config["bits"], smash_config["group_size"], smash_config["sym"],
                                   smash_config["n_grid"], tuple(smash_config["exclude"]),
                                   clip_search=smash_config["clip_search"], fold_only=smash_config["fold_only"])
        support.record(smash_config, specs, targets)
        return model

    def stream_step(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> BlockStep:
        """AWQ on each block's calibration inputs, for a model streamed block by block."""
        return awq_step(support.read_calibration_ids(model, smash_config), smash_config["bits"],
                        smash_config["group_size"], smash_config["sym"], smash_config["n_grid"],
                        smash_config["clip_search"], tuple(smash_config["exclude"]),
                        fold_only=smash_config["fold_only"])
