"""c_translate: an encoder-decoder (translation, summarization) converted to CTranslate2, with Pruna's name."""

from __future__ import annotations

from typing import Any

from slimkit.algorithms.compilation._ctranslate2_compiler import CTranslate2Compiler, loader_for, supported_configs
from slimkit.algorithms.compilation._ctranslate2_seq2seq import CT2Translator
from slimkit.core.registry import register


@register
class CTranslate(CTranslate2Compiler):
    """Convert a Hugging Face encoder-decoder (BART, Marian, M2M100, NLLB, T5...) to CTranslate2 and run its Translator.

    CTranslate2's own converter writes the weights (``weight_bits`` 8: int8, 16: float16, 32: float32) and the
    tokenizer's vocabulary. ``generate(input_ids)`` returns the decoded ids (start token first, greedy unless
    ``num_beams`` or ``do_sample``) as a transformers seq2seq model does; ``forward(input_ids, decoder_input_ids)``
    returns the decoder's logits under teacher forcing. Saved as CTranslate2's folder (no pickle); loading needs no
    base model. Needs ``pip install 'slimkit[ctranslate2]'`` and the model's tokenizer (``cfg.add_tokenizer``).
    """

    algorithm_name = "c_translate"
    runner = CT2Translator

    def model_check_fn(self, model: Any) -> bool:
        """A Hugging Face encoder-decoder (not Whisper) whose config CTranslate2's converter knows."""
        config = getattr(model, "config", None)
        return (loader_for(model) is not None and bool(getattr(config, "is_encoder_decoder", False))
                and getattr(config, "model_type", "") != "whisper")

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return (f"It converts Hugging Face encoder-decoder models whose config CTranslate2 converts "
                f"({supported_configs()}); causal LMs go to c_generate.")
