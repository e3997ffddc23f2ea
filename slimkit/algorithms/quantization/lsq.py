"""lsq: learned step size quantization-aware training of weights and layer inputs."""

from __future__ import annotations

from typing import Any

from ConfigSpace import UniformIntegerHyperparameter
from torch import nn

from slimkit.algorithms.quantization._training import TrainingQuantizer, build_config_list
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.engines.quantization import LsqEngine, Quantizer


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
        return [
            UniformIntegerHyperparameter("bits", 2, 8, default_value=8,
                                         meta={"desc": "Bit width of weights and activations."}),
            Boolean("quantize_activations", True,
                    meta={"desc": "Also quantize each Linear/Conv layer's input with a learned step."}),
        ]

    def config_list(self, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> list[dict[str, Any]]:
        """Weights (and inputs) of every Linear/Conv layer at ``bits``."""
        types = ["weight", "input"] if smash_config["quantize_activations"] else ["weight"]
        return build_config_list(model, types, dict.fromkeys(types, int(smash_config["bits"])), smash_config["exclude"])

    def make_quantizer(self, model: nn.Module, config_list: list[dict[str, Any]], optimizer: Any,
                       smash_config: SmashConfigPrefixWrapper) -> Quantizer:
        """LsqQuantizer (its step sizes join the optimizer)."""
        return LsqEngine(model, config_list, optimizer)
