"""lsq: learned step size quantization-aware training of weights and layer inputs."""

from __future__ import annotations

from typing import Any

from torch import nn

from slimkit.algorithms.quantization._training import TrainingQuantizer, bits_config_list, bits_hyperparameters
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.quantization import LsqEngine


@register
class LSQ(TrainingQuantizer):
    """Learned step size quantization: the quantizer's step sizes train with the weights, then are frozen.

    Each Linear/Conv layer's weight (signed) and input (unsigned after ReLU, else signed) get a step size
    that gradient descent learns together with the weights during ``epochs`` of fine-tuning on the
    SmashConfig's train data (cross-entropy). The result is frozen to integer weight codes (uint8) with
    the learned scales; the forward still runs in floating point.
    """

    algorithm_name = "lsq"
    renamed_hyperparameters = {"lsq": {"weight_bits": "bits"}}  # Pruna's name
    engine = LsqEngine
    references = {"Paper": "https://arxiv.org/abs/1902.08153",
                  "NNI": "https://nni.readthedocs.io/en/stable/compression/quantizer.html"}

    def quantizer_hyperparameters(self) -> list:
        """Bits and activations (the shared training settings follow)."""
        return bits_hyperparameters("Also quantize each Linear/Conv layer's input with a learned step.")

    def config_list(self, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> list[dict[str, Any]]:
        """Weights (and inputs) of every Linear/Conv layer at ``bits``; the step sizes join the optimizer."""
        return bits_config_list(model, smash_config)
