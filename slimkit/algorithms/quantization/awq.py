"""awq: activation-aware weight quantization (calibrated per-channel scales, folded), stored packed."""

from __future__ import annotations

from typing import Any

from ConfigSpace import CategoricalHyperparameter, UniformIntegerHyperparameter

from slimkit.algorithms.quantization import _lowbit_support as support
from slimkit.algorithms.quantization._lowbit import CalibratedLowBitQuantizer, clip_search_hyperparameter
from slimkit.core.contract import LayerResult, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.engines.quantization.lowbit.blockwise import BlockStep, awq_step

#: llm-compressor's weight-only integer schemes (compressed-tensors presets) -> (bits, group_size, sym)
QUANT_SCHEMES: dict[str, tuple[int, int, bool]] = {
    "W4A16": (4, 128, True), "W4A16_ASYM": (4, 128, False), "W8A16": (8, 128, True), "W3A16": (3, 128, True),
    "W2A16": (2, 128, True)}


def _grid(smash_config: SmashConfigPrefixWrapper) -> tuple[int, int, bool]:
    """(bits, group_size, sym): the ``quant_scheme`` preset when one is set, else the three settings."""
    values = AWQ.effective_hyperparameters({k: smash_config[k] for k in ("quant_scheme", "bits", "group_size", "sym")})
    return int(values["bits"]), int(values["group_size"]), bool(values["sym"])


@register
class AWQ(CalibratedLowBitQuantizer):
    """AWQ: activation-aware scaling of each Linear's input channels before group-wise rounding.

    Channels are scaled by ``mean|x|^alpha`` so the ones that meet large activations keep more precision;
    ``alpha`` is searched on a grid per layer group. The inverse scale is folded into the preceding norm or
    Linear where that is exact (otherwise the packed layer keeps a small input-scale vector, or, with
    ``fold_only``, the layer is not scaled); each group's
    clipping range is then searched on activation-weighted error. Runs block by block on calibration text;
    needs a tokenizer and data (e.g. ``cfg.add_tokenizer(tok); cfg.add_data("PyDocText")``). Stored packed
    like rtn. ``quant_scheme`` takes llm-compressor's (and Pruna's) scheme names: ``W4A16`` (4-bit symmetric,
    groups of 128), ``W4A16_ASYM``, ``W8A16``, ``W3A16``, ``W2A16``.
    """

    algorithm_name = "awq"
    produces = LayerResult(input_scale_unless="fold_only")
    renamed_hyperparameters = {"awq": {"weight_bits": "bits"}}  # Pruna's name
    references = {"AWQ": "https://arxiv.org/abs/2306.00978"}

    def get_hyperparameters(self) -> list:
        """Scheme, bits, group size, sym, grid size, clipping, fold-only, calibration size, exclusions."""
        return [
            CategoricalHyperparameter("quant_scheme", [None, *QUANT_SCHEMES], default_value=None, meta={
                "desc": "llm-compressor's weight-only scheme (W4A16: 4-bit symmetric groups of 128; _ASYM: with a "
                        "zero point), setting bits, group_size and sym; None: those three decide. Schemes that "
                        "quantize activations (W8A8, FP8, ...) are not AWQ's: see int8_smooth / int8_static."}),
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

    @classmethod
    def effective_hyperparameters(cls, values: dict[str, Any]) -> dict[str, Any]:
        """``bits``, ``group_size`` and ``sym`` as ``quant_scheme`` sets them, when it is set."""
        scheme = values.get("quant_scheme")
        if scheme is None:
            return values
        return {**values, **dict(zip(("bits", "group_size", "sym"), QUANT_SCHEMES[scheme], strict=True))}

    def stream_step(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> BlockStep:
        """AWQ on each block's calibration inputs, for a model streamed block by block."""
        return awq_step(support.read_calibration_ids(model, smash_config), *_grid(smash_config),
                        smash_config["n_grid"], smash_config["clip_search"], tuple(smash_config["exclude"]),
                        fold_only=smash_config["fold_only"])
