"""dorefa: DoReFa-Net weight quantization-aware training."""

from __future__ import annotations

from typing import Any

from ConfigSpace import UniformIntegerHyperparameter
from torch import nn

from slimkit.algorithms.quantization._training import TrainingQuantizer, build_config_list
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.engines.quantization import DoReFaEngine


@register
class DoReFa(TrainingQuantizer):
    """DoReFa weight quantization: tanh-normalised weights on a uniform k-bit grid, fine-tuned, then frozen.

    Weights of every Linear/Conv layer are mapped through ``tanh``, normalised to [0, 1], rounded to
    ``2**bits`` levels (straight-through) and mapped back to [-1, 1], rescaled by the layer's ``max |w|``
    unless ``rescale`` is off. After ``epochs`` of fine-tuning on the SmashConfig's train data
    (cross-entropy) the weights are frozen to integer codes (uint8) with one scale per layer. Activations
    stay in floating point (DoReFa's [0, 1] activation quantizer only suits networks built for it; use the
    compression API's ``DoReFaQuantizer`` with ``"output"`` for that).
    """

    algorithm_name = "dorefa"
    renamed_hyperparameters = {"dorefa": {"weight_bits": "bits"}}  # Pruna's name
    engine = DoReFaEngine
    references = {"Paper": "https://arxiv.org/abs/1606.06160",
                  "NNI": "https://nni.readthedocs.io/en/stable/compression/quantizer.html"}
    engine_args = ("rescale",)

    def quantizer_hyperparameters(self) -> list:
        """Bits and rescaling (the shared training settings follow)."""
        return [
            UniformIntegerHyperparameter("bits", 1, 8, default_value=8, meta={"desc": "Bit width of the weights."}),
            Boolean("rescale", True, meta={"desc": "Scale the [-1, 1] weights by the layer's max |w| so a "
                                                   "pretrained model keeps its activation scale."}),
        ]

    def config_list(self, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> list[dict[str, Any]]:
        """Weights of every Linear/Conv layer at ``bits``."""
        return build_config_list(model, ["weight"], {"weight": int(smash_config["bits"])}, smash_config["exclude"])
