"""qat: quantization-aware training with affine fake-quantization and EMA activation observers."""

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
from slimkit.compression.quantization import QATQuantizer
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register


@register
class QAT(SlimkitQuantizer):
    """Quantization-aware training: fine-tune with fake-quantized weights (and layer inputs), then freeze.

    Weights get per-channel affine scales from their min/max; layer inputs get scales from EMA-tracked
    ranges; gradients pass straight through inside the clamp range. After ``epochs`` of fine-tuning on the
    SmashConfig's train data (cross-entropy), every Linear/Conv layer is frozen to integer weight codes
    (uint8, about 4x smaller on disk than fp32) with fixed scales; the forward still runs in floating point.
    """

    algorithm_name = "qat"
    engine = QATQuantizer
    references = {"Paper": "https://arxiv.org/abs/1712.05877",
                  "NNI": "https://nni.readthedocs.io/en/stable/compression/quantizer.html"}
    dataset_required = True
    save_fn = SaveFn.REPLAY
    replay_on_meta = True  # replay wraps layers in empty frozen-code layers; reads no weight values

    def get_hyperparameters(self) -> list:
        """Bits, activations, per-channel scales, EMA decay and the shared training settings."""
        return [
            UniformIntegerHyperparameter("bits", 2, 8, default_value=8,
                                         meta={"desc": "Bit width of weights and activations."}),
            Boolean("quantize_activations", True,
                    meta={"desc": "Also fake-quantize each Linear/Conv layer's input (EMA-observed range)."}),
            Boolean("per_channel", True, meta={"desc": "One weight scale per output channel instead of per tensor."}),
            UniformIntegerHyperparameter("quant_start_step", 0, 100000, default_value=0,
                                         meta={"desc": "Optimizer steps during which activations are only "
                                                       "observed before they are quantized."}),
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
        config_list = build_config_list(model, types, dict.fromkeys(types, bits), smash_config["exclude"],
                                        {"quant_start_step": int(smash_config["quant_start_step"])})
        per_channel = bool(smash_config["per_channel"])
        return train_and_freeze(model, smash_config,
                                lambda m, c, o: QATQuantizer(m, c, o, per_channel=per_channel), config_list)

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild the frozen quantized layers; the saved codes and scales then load strictly."""
        return replay_frozen(model, state)
