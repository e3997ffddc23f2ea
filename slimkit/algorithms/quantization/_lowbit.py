"""What the four low-bit smash quantizers (rtn, hqq, gptq, awq) share as algorithm classes.

Packed layers are rebuilt empty from the saved specs on load (REPLAY; safe on a meta-parameter skeleton), and the
calibrated ones (gptq, awq) need a token-id language model with transformer blocks plus a tokenizer and data.
"""

from __future__ import annotations

from typing import Any

from slimkit.algorithms.quantization import _lowbit_support as support
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean, Hyperparameter


class LowBitQuantizer(SlimkitQuantizer):
    """Base of the packed low-bit quantizers: any model with Linear (or GPT-2 Conv1D) layers; replayed on load."""

    save_fn = SaveFn.REPLAY
    replay_on_meta = True  # replay builds empty PackedLinear layers from the saved specs

    def model_check_fn(self, model: Any) -> bool:
        """Needs at least one nn.Linear (or GPT-2 Conv1D)."""
        return support.has_quantizable(model)

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return "It quantizes nn.Linear (and GPT-2 Conv1D) layers and the model has none."

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Swap the recorded layers for empty packed ones; the saved codes then load strictly."""
        return support.replay(model, state)

    def stream_finish(self, smash_config: SmashConfigPrefixWrapper, summary: dict[str, Any]) -> None:
        """Record the packed layers' specs of a streaming run, as ``_apply`` does."""
        support.record(smash_config, summary["specs"])


class CalibratedLowBitQuantizer(LowBitQuantizer):
    """Base of the low-bit quantizers that run calibration text through a language model block by block."""

    tokenizer_required = True
    dataset_required = True

    def model_check_fn(self, model: Any) -> bool:
        """Needs a token-id language model with transformer blocks holding Linear layers."""
        return support.is_block_language_model(model)

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return ("It needs a language model taking input_ids with a list of transformer blocks holding nn.Linear "
                "(or GPT-2 Conv1D) layers.")


def clip_search_hyperparameter() -> Hyperparameter:
    """``clip_search``: shrink each group's range where that lowers its activation-weighted error."""
    return Boolean("clip_search", True, meta={"desc": "Shrink each group's range where that lowers its "
                                                      "activation-weighted error (clips a few extreme weights)."})
