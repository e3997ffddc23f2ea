"""lsq: learned step size quantization-aware training of weights and layer inputs."""

from __future__ import annotations

from typing import Any

from ConfigSpace import UniformIntegerHyperparameter

from slimkit.algorithms.quantization._training import (
    LAYER_TYPES,
    build_config_list,
    has_quantizable_layers,
    replay_frozen,
    train_and_freeze,
    training_hyperparameters,
)
from slimkit.compression.quantization import LsqQuantizer
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register


@register
class LSQ(SlimkitQuantizer):
    """Learned step size quantization: the quantizer's step sizes train with the weights, then are frozen.

    Each Linear/Conv layer's weight (signed) and input (unsigned after ReLU, else signed) get a step size
    that gradient descent learns together with the weights during ``epochs`` of fine-tuning on the
    SmashConfig's train data (cross-entropy). The result is frozen to integer weight codes (uint8) with
    the learned scales; the forward still runs in floating point.
    """

    algorithm_name = "lsq"
    engine = LsqQuantizer
    references = {"Paper": "https://arxiv.org/abs/1902.08153",
                  "NNI": "https://nni.readthedocs.io/en/stable/compression/quantizer.html"}
    dataset_required = True
    save_fn = SaveFn.REPLAY
    replay_on_meta = True  # replay wraps layers in empty frozen-code layers; reads no weight values

    def get_hyperparameters(self) -> list:
        """Bits, activations and the shared training settings."""
        return [
            UniformIntegerHyperparameter("bits", 2, 8, default_value=8,
                                         meta={"desc": "Bit width of weights and activations."}),
            Boolean("quantize_activations", True,
                    meta={"desc": "Also quantize each Linear/Conv layer's input with a learned step."}),
            *training_hyperparameters(epochs=2, lr=1e-3),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs a Linear or Conv layer."""
        return has_quantizable_layers(model)

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return f"It quantizes {', '.join(LAYER_TYPES)} layers and the model has none."

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        bits = int(smash_config["bits"])
        types = ["weight", "input"] if smash_config["quantize_activations"] else ["weight"]
        config_list = build_config_list(model, types, dict.fromkeys(types, bits), smash_config["exclude"])
        return train_and_freeze(model, smash_config, LsqQuantizer, config_list)

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild the frozen quantized layers; the saved codes and scales then load strictly."""
        return replay_frozen(model, state)
