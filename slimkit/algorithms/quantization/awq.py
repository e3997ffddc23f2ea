"""awq: activation-aware weight quantization (calibrated per-channel scales, folded), stored packed."""

from __future__ import annotations

from typing import Any

from ConfigSpace import UniformIntegerHyperparameter

from slimkit.algorithms.base import SaveFn, SlimkitQuantizer
from slimkit.algorithms.registry import register
from slimkit.compression.quantization.lowbit import quantize_model_awq
from slimkit.compression.quantization.lowbit import smash_support as support
from slimkit.config.hyperparameters import Boolean
from slimkit.config.smash_config import SmashConfigPrefixWrapper


@register
class AWQ(SlimkitQuantizer):
    """AWQ: activation-aware scaling of each Linear's input channels before group-wise rounding.

    Channels are scaled by ``mean|x|^alpha`` so the ones that meet large activations keep more precision;
    ``alpha`` is searched on a grid per layer group. The inverse scale is folded into the preceding norm or
    Linear where that is exact (otherwise the packed layer keeps a small input-scale vector); each group's
    clipping range is then searched on activation-weighted error. Runs block by block on calibration text;
    needs a tokenizer and data (e.g. ``cfg.add_tokenizer(tok); cfg.add_data("PyDocText")``). Stored packed
    like rtn.
    """

    algorithm_name = "awq"
    references = {"AWQ": "https://arxiv.org/abs/2306.00978"}
    tokenizer_required = True
    dataset_required = True
    save_fn = SaveFn.REPLAY
    replay_on_meta = True  # replay builds empty PackedLinear layers from the saved specs

    def get_hyperparameters(self) -> list:
        """Bits, group size, sym, grid size, clipping, calibration size, exclusions."""
        return [
            *support.weight_hyperparameters(),
            UniformIntegerHyperparameter("n_grid", 2, 100, default_value=10,
                                         meta={"desc": "Values of alpha tried in [0, 1) per layer group (for "
                                                               "each of the two scale formulas)."}),
            Boolean("clip_search", True, meta={"desc": "Shrink each group's range where that lowers its "
                                                       "activation-weighted error (clips a few extreme weights)."}),
            *support.calibration_hyperparameters(),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs a token-id language model with transformer blocks holding Linear layers."""
        return support.is_block_language_model(model)

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return ("It needs a language model taking input_ids with a list of transformer blocks holding nn.Linear "
                "(or GPT-2 Conv1D) layers.")

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        ids = support.read_calibration_ids(model, smash_config)
        specs = quantize_model_awq(model, ids, smash_config["bits"], smash_config["group_size"], smash_config["sym"],
                                   smash_config["n_grid"], tuple(smash_config["exclude"]),
                                   clip_search=smash_config["clip_search"])
        support.record(smash_config, specs)
        return model

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Empty packed layers of the saved shapes; the packed weights then load strictly."""
        return support.replay(model, state)
