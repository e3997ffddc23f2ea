"""hqq: half-quadratic quantization (data-free optimised zeros/scales), stored packed (2/3/4/8 bits)."""

from __future__ import annotations

from typing import Any

from ConfigSpace import UniformIntegerHyperparameter

from slimkit.algorithms.quantization import _lowbit_support as support
from slimkit.algorithms.quantization._lowbit import LowBitQuantizer
from slimkit.compression.quantization.lowbit import quantize_model_hqq
from slimkit.compression.quantization.lowbit.blockwise import BlockStep, hqq_step
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register


@register
class HQQ(LowBitQuantizer):
    """Half-Quadratic Quantization: per-group zero points (and optionally scales) fitted to a robust l_p error.

    Instead of min/max, each group's parameters minimise ``|W - dequant(quant(W))|^p`` with ``p = 0.7`` by
    half-quadratic splitting (alternating closed-form steps), which keeps outlier weights from spoiling the
    grid for the rest. No calibration data; seconds per model. Our own implementation (no ``hqq`` package).
    """

    algorithm_name = "hqq"
    references = {"HQQ": "https://mobiusml.github.io/hqq_blog/"}

    def get_hyperparameters(self) -> list:
        """Bits, group size, optimisation steps, scale refit, exclusions."""
        return [
            *support.weight_hyperparameters(with_sym=False),
            UniformIntegerHyperparameter("iters", 1, 200, default_value=20,
                                         meta={"desc": "Half-quadratic optimisation steps per layer."}),
            Boolean("optimize_scale", False, meta={"desc": "Also refit each group's scale by least squares at "
                                                           "every step (the zero is always optimised)."}),
        ]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        specs = quantize_model_hqq(model, smash_config["bits"], smash_config["group_size"], smash_config["iters"],
                                   smash_config["optimize_scale"], tuple(smash_config["exclude"]))
        support.record(smash_config, specs)
        return model

    def stream_step(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> BlockStep:
        """HQQ one layer at a time, for a model streamed block by block."""
        return hqq_step(smash_config["bits"], smash_config["group_size"], smash_config["iters"],
                        smash_config["optimize_scale"], tuple(smash_config["exclude"]))
