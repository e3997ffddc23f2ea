"""qat: quantization-aware training with affine fake-quantization and EMA activation observers."""

from __future__ import annotations

from typing import Any

from ConfigSpace import UniformIntegerHyperparameter
from torch import nn

from slimkit.algorithms.quantization._training import TrainingQuantizer, bits_config_list, bits_hyperparameters
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.engines.quantization import QATEngine


@register
class QAT(TrainingQuantizer):
    """Quantization-aware training: fine-tune with fake-quantized weights (and layer inputs), then freeze.

    Weights get per-channel affine scales from their min/max; layer inputs get scales from EMA-tracked
    ranges; gradients pass straight through inside the clamp range. After ``epochs`` of fine-tuning on the
    SmashConfig's train data (cross-entropy), every Linear/Conv layer is frozen to integer weight codes
    (uint8, about 4x smaller on disk than fp32) with fixed scales; the forward still runs in floating point.
    """

    algorithm_name = "qat"
    aliases = ("QAT_Quantizer",)
    renamed_hyperparameters = {"qat": {"weight_bits": "bits"}}  # Pruna's name
    engine = QATEngine
    references = {"Paper": "https://arxiv.org/abs/1712.05877",
                  "NNI": "https://nni.readthedocs.io/en/stable/compression/quantizer.html"}
    engine_args = ("per_channel",)

    def quantizer_hyperparameters(self) -> list:
        """Bits, activations, per-channel scales, observation start (the shared training settings follow)."""
        return [
            *bits_hyperparameters("Also fake-quantize each Linear/Conv layer's input (EMA-observed range)."),
            Boolean("per_channel", True, meta={"desc": "One weight scale per output channel instead of per tensor."}),
            UniformIntegerHyperparameter("quant_start_step", 0, 100000, default_value=0,
                                         meta={"desc": "Optimizer steps during which activations are only "
                                                       "observed before they are quantized."}),
        ]

    def config_list(self, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> list[dict[str, Any]]:
        """Weights (and inputs) of every Linear/Conv layer at ``bits``, with the observation-only start."""
        return bits_config_list(model, smash_config, {"quant_start_step": int(smash_config["quant_start_step"])})
