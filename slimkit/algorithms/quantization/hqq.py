"""hqq: half-quadratic quantization (data-free optimised zeros/scales), stored packed (2/3/4/8 bits)."""

from __future__ import annotations

from typing import Any

from ConfigSpace import UniformIntegerHyperparameter

from slimkit.algorithms.base import SaveFn, SlimkitQuantizer
from slimkit.algorithms.registry import register
from slimkit.compression.quantization.lowbit import quantize_model_hqq
from slimkit.compression.quantization.lowbit import smash_support as support
from slimkit.config.hyperparameters import Boolean
from slimkit.config.smash_config import SmashConfigPrefixWrapper


@register
class HQQ(SlimkitQuantizer):
    """Half-Quadratic Quantization: per-group zero points (and optionally scales) fitted to a robust l_p error.

    Instead of min/max, each group's parameters minimise ``|W - dequant(quant(W))|^p`` with ``p = 0.7`` by
    half-quadratic splitting (alternating closed-form steps), which keeps outlier weights from spoiling the
    grid for the rest. No calibration data; seconds per model. Our own implementation (no ``hqq`` package).
    """

    algorithm_name = "hqq"
    references = {"HQQ": "https://mobiusml.github.io/hqq_blog/"}
    save_fn = SaveFn.REPLAY
    replay_on_meta = True  # replay builds empty PackedLinear layers from the saved specs

    def get_hyperparameters(self) -> list:
        """Bits, group size, optimisation steps, scale refit, exclusions."""
        return [
            *support.weight_hyperparameters(with_sym=False),
            UniformIntegerHyperparameter("iters", 1, 200, default_value=20,
                                         meta={"desc": "Half-quadratic optimisation steps per layer."}),
            Boolean("optimize_scale", False, meta={"desc": "Also refit each group's scale by least squares at "
                                                           "every step (the zero is always optimised)."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs at least one nn.Linear (or GPT-2 Conv1D)."""
        return support.has_quantizable(model)

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return "It quantizes nn.Linear (and GPT-2 Conv1D) layers and the model has none."

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        specs = quantize_model_hqq(model, smash_config["bits"], smash_config["group_size"], smash_config["iters"],
                                   smash_config["optimize_scale"], tuple(smash_config["exclude"]))
        support.record(smash_config, specs)
        return model

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Empty packed layers of the saved shapes; the packed weights then load strictly."""
        return support.replay(model, state)
