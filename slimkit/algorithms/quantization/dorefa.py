"""dorefa: DoReFa-Net weight quantization-aware training."""

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
from slimkit.compression.quantization import DoReFaQuantizer
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register


@register
class DoReFa(SlimkitQuantizer):
    """DoReFa weight quantization: tanh-normalised weights on a uniform k-bit grid, fine-tuned, then frozen.

    Weights of every Linear/Conv layer are mapped through ``tanh``, normalised to [0, 1], rounded to
    ``2**bits`` levels (straight-through) and mapped back to [-1, 1], rescaled by the layer's ``max |w|``
    unless ``rescale`` is off. After ``epochs`` of fine-tuning on the SmashConfig's train data
    (cross-entropy) the weights are frozen to integer codes (uint8) with one scale per layer. Activations
    stay in floating point (DoReFa's [0, 1] activation quantizer only suits networks built for it; use the
    compression API's ``DoReFaQuantizer`` with ``"output"`` for that).
    """

    algorithm_name = "dorefa"
    engine = DoReFaQuantizer
    references = {"Paper": "https://arxiv.org/abs/1606.06160",
                  "NNI": "https://nni.readthedocs.io/en/stable/compression/quantizer.html"}
    dataset_required = True
    save_fn = SaveFn.REPLAY
    replay_on_meta = True  # replay wraps layers in empty frozen-code layers; reads no weight values

    def get_hyperparameters(self) -> list:
        """Bits, rescaling and the shared training settings."""
        return [
            UniformIntegerHyperparameter("bits", 1, 8, default_value=8, meta={"desc": "Bit width of the weights."}),
            Boolean("rescale", True, meta={"desc": "Scale the [-1, 1] weights by the layer's max |w| so a "
                                                   "pretrained model keeps its activation scale."}),
            *training_hyperparameters(epochs=2, lr=1e-3),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs a Linear or Conv layer."""
        return has_quantizable_layers(model)

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return f"It quantizes {', '.join(LAYER_TYPES)} layers and the model has none."

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        config_list = build_config_list(model, ["weight"], {"weight": int(smash_config["bits"])},
                                        smash_config["exclude"])
        rescale = bool(smash_config["rescale"])
        return train_and_freeze(model, smash_config,
                                lambda m, c, o: DoReFaQuantizer(m, c, o, rescale=rescale), config_list)

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild the frozen quantized layers; the saved codes and scales then load strictly."""
        return replay_frozen(model, state)
