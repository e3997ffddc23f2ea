"""What the four low-bit smash quantizers (rtn, hqq, gptq, awq) share as algorithm classes.

Packed layers are rebuilt empty from the saved specs on load (REPLAY; safe on a meta-parameter skeleton), and the
calibrated ones (gptq, awq) need a token-id language model with transformer blocks plus a tokenizer and data.
"""

from __future__ import annotations

from typing import Any

from slimkit.algorithms.quantization import _lowbit_support as support
from slimkit.algorithms.quantization._targets import TargetsMixin, model_targets
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean, Hyperparameter
from slimkit.engines.quantization.lowbit.blockwise import quantize_in_memory
from slimkit.engines.quantization.lowbit.quantize import TARGET_KINDS


class LowBitQuantizer(TargetsMixin, SlimkitQuantizer):
    """Base of the packed low-bit quantizers: any model with Linear (or GPT-2 Conv1D) layers; replayed on load.

    The model check and its refusal come from :class:`TargetsMixin` (the layer types found, why none qualifies).
    ``_apply`` quantizes the whole model in memory with the settings of the subclass's ``stream_step``.
    """

    save_fn = SaveFn.REPLAY
    replay_on_meta = True  # replay builds empty PackedLinear layers from the saved specs
    target_kinds = TARGET_KINDS  # dense layers and MoE experts modules

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        targets = model_targets(model)
        support.record(smash_config, quantize_in_memory(model, self.stream_step(model, smash_config)), targets)
        return model

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Swap the recorded layers for empty packed ones; the saved codes then load strictly."""
        return support.replay(model, state)

    def stream_finish(self, smash_config: SmashConfigPrefixWrapper, summary: dict[str, Any]) -> None:
        """Record the packed layers' specs and the coverage of a streaming run, as ``_apply`` does.

        ``summary["targets"]`` are the skeleton's targets found before quantizing (:func:`model_targets`).
        """
        support.record(smash_config, summary["specs"], summary["targets"])


class CalibratedLowBitQuantizer(LowBitQuantizer):
    """Base of the low-bit quantizers that run calibration text through a language model block by block."""

    tokenizer_required = True
    dataset_required = True

    supported_models = ("It needs a language model taking input_ids with a list of transformer blocks holding "
                        "nn.Linear (or subclasses computing x W^T + b) or GPT-2 Conv1D layers.")

    def model_check_fn(self, model: Any) -> bool:
        """Needs a token-id language model with transformer blocks holding Linear layers."""
        return super().model_check_fn(model) and support.is_block_language_model(model)


def clip_search_hyperparameter() -> Hyperparameter:
    """``clip_search``: shrink each group's range where that lowers its activation-weighted error."""
    return Boolean("clip_search", True, meta={"desc": "Shrink each group's range where that lowers its "
                                                      "activation-weighted error (clips a few extreme weights)."})
