"""bnn: binarized weights (and optionally activations), trained with the BNN straight-through estimator."""

from __future__ import annotations

from typing import Any

from slimkit.algorithms.quantization._training import (
    ACTIVATION_TYPES,
    LAYER_TYPES,
    build_config_list,
    has_quantizable_layers,
    layer_names,
    replay_frozen,
    train_and_freeze,
    training_hyperparameters,
)
from slimkit.compression.quantization import BNNQuantizer
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.errors import ConfigError


@register
class BNN(SlimkitQuantizer):
    """Binarized network: every Linear/Conv weight becomes +-alpha (1 bit), fine-tuned, then frozen.

    Weights are binarized with a per-channel scale ``alpha = mean|w|`` (XNOR-Net; ``scale_weights=False``
    gives plain +-1), trained with the BNN paper's straight-through estimator (gradient kept where
    ``|w| <= 1``) and latent weights clipped to [-1, 1]. ``binarize_activations`` also turns the outputs of
    activation layers (ReLU, Hardtanh, ...) into +-1, which costs far more accuracy. Frozen weights are
    stored as one uint8 code per weight (4x smaller than fp32, not yet bit-packed).
    """

    algorithm_name = "bnn"
    engine = BNNQuantizer
    references = {"Paper": "https://arxiv.org/abs/1602.02830", "XNOR-Net": "https://arxiv.org/abs/1603.05279"}
    dataset_required = True
    save_fn = SaveFn.REPLAY
    replay_on_meta = True  # replay wraps layers in empty frozen-code layers; reads no weight values

    def get_hyperparameters(self) -> list:
        """Weight scaling, activation binarization and the shared training settings."""
        return [
            Boolean("scale_weights", True, meta={"desc": "Per-channel scale mean|w| on the +-1 weights (XNOR-Net)."}),
            Boolean("binarize_activations", False,
                    meta={"desc": "Also binarize the outputs of activation layers (ReLU, Hardtanh, ...) to +-1."}),
            *training_hyperparameters(epochs=3, lr=1e-3),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs a Linear or Conv layer."""
        return has_quantizable_layers(model)

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return f"It binarizes {', '.join(LAYER_TYPES)} layers and the model has none."

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        config_list = build_config_list(model, ["weight"], {"weight": 1}, smash_config["exclude"])
        if smash_config["binarize_activations"]:
            acts = layer_names(model, ACTIVATION_TYPES)
            if not acts:
                raise ConfigError(
                    f"bnn_binarize_activations is on but the model has no activation module "
                    f"({', '.join(ACTIVATION_TYPES)}); set it to False."
                )
            config_list.append({"quant_types": ["output"], "quant_bits": 1, "op_names": acts})
        scale = bool(smash_config["scale_weights"])
        return train_and_freeze(model, smash_config,
                                lambda m, c, o: BNNQuantizer(m, c, o, scale_weights=scale), config_list)

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild the frozen quantized layers; the saved codes and scales then load strictly."""
        return replay_frozen(model, state)
