"""naive: NNI's naive quantizer, symmetric per-tensor weights (8 bits by default), no data and no training."""

from __future__ import annotations

from typing import Any

from ConfigSpace import UniformIntegerHyperparameter

from slimkit.algorithms.quantization._training import FrozenQuantizer, build_config_list, freeze_and_record
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import ListHyperparameter
from slimkit.core.registry import register
from slimkit.core.weights import find_targets
from slimkit.engines.quantization import NaiveQuantizer


@register
class Naive(FrozenQuantizer):
    """Naive weight quantization: each Linear/Conv weight rounded to a symmetric per-tensor grid, then frozen.

    ``scale = max|w| / ((2**bits - 1) / 2)`` per layer, codes centred on ``2**(bits-1)`` (NNI's
    ``NaiveQuantizer``, rounding to the nearest step). The frozen layers hold uint8 codes and one scale each
    (about 4x smaller on disk than fp32 at 8 bits); the forward still runs in floating point. Activations are
    not quantized. No data needed: the quickest quantizer, and the least accurate at low bit widths.
    """

    algorithm_name = "naive"
    engine = NaiveQuantizer
    references = {"NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Quantizer.html#naive-quantizer"}

    def get_hyperparameters(self) -> list:
        """Bit width and the layers left in full precision."""
        return [
            UniformIntegerHyperparameter("bits", 2, 8, default_value=8, meta={"desc": "Bit width of the weights."}),
            ListHyperparameter("exclude", (), meta={"desc": "Layers kept in full precision: exact names or glob "
                                                            "patterns, e.g. ['classifier.3']."}),
        ]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        targets = find_targets(model)  # before wrapping: what coverage is measured against
        config = build_config_list(model, ["weight"], {"weight": int(smash_config["bits"])}, smash_config["exclude"])
        quantizer = NaiveQuantizer(model, config)
        quantizer.compress()
        freeze_and_record(quantizer, smash_config, targets)
        return model
